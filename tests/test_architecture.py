"""The two rooms: the numerics (``spectral``, ``solvers`` outside ``solvers.app``) import nothing of the run
layer (``solvers.app``) nor its tools (HDF5, plotting, argument parsing, TOML); the run layer may import the
numerics. Checked on the import statements of every module, as written."""
import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
#: what the numerics may not import: the run layer and its tools
FORBIDDEN = ("solvers.app", "h5py", "matplotlib", "argparse", "tomllib", "tomli")


def _imports(path: Path, package: str) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against ``package``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def _numerics() -> list[tuple[Path, str]]:
    files = [(p, "spectral") for p in (ROOT / "spectral").glob("*.py")]
    files += [(p, "solvers") for p in (ROOT / "solvers").glob("*.py")]
    return files


def test_the_numerics_do_not_import_the_run_layer():
    offenders = []
    for path, package in _numerics():
        for name in _imports(path, package):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(offenders)
    assert len(_numerics()) >= 15                         # the check saw the modules


def test_both_spaces_declare_the_space_interface():
    """Every member of the Space protocol exists on both spaces (runtime_checkable checks presence)."""
    from solvers.pde_circle import CircleSpace
    from solvers.pde_sphere import SphereSpace
    from solvers.spaces import Space

    members = [m for m in vars(Space) if not m.startswith("_")] + list(Space.__annotations__)
    for space in (CircleSpace, SphereSpace):
        assert isinstance(space, Space), space
        missing = [m for m in members if not hasattr(space, m)]
        assert not missing, (space.__name__, missing)
    # the resolution parameter: K modes hold wavenumbers up to K - 1, degree L holds degrees up to L
    assert CircleSpace.degree_holding(64) == 65 and SphereSpace.degree_holding(64) == 64
    assert CircleSpace.degree_of(CircleSpace.ncoef(64)) == 64 and SphereSpace.degree_of(SphereSpace.ncoef(64)) == 64
    # the coefficients' coordinates: k = 0..K-1 on S^1; on S^2 the (L + 1)(L + 2) / 2 pairs 0 <= m <= l <= L
    k, lm = CircleSpace.mode_coordinates(16), SphereSpace.mode_coordinates(16)
    assert list(k) == ["k"] and list(k["k"]) == list(range(16))
    assert len(lm["l"]) == 17 * 18 // 2 == SphereSpace.ncoef(16) and all(0 <= lm["m"]) and all(lm["m"] <= lm["l"])
    assert len(set(zip(lm["l"], lm["m"]))) == len(lm["l"]) and max(lm["l"]) == 16


def test_no_manifold_branches_outside_the_spaces():
    """The comparison and the continuation reach the manifold through the space interface only."""
    for name in ("comparison.py", "lagrangian.py", "app/archive_writer.py", "app/plots_energy.py"):
        text = (ROOT / "solvers" / name).read_text()
        assert "d == 2" not in text and "d == 3" not in text, name


def _module_files() -> dict[str, tuple[Path, str]]:
    """Every module of the package (not the packages' __init__) by dotted name: path and its package."""
    out = {}
    for folder in ("spectral", "solvers", "solvers/app"):
        package = folder.replace("/", ".")
        for p in (ROOT / folder).glob("*.py"):
            if p.stem != "__init__":
                out[f"{package}.{p.stem}"] = (p, package)
    return out


#: the largest module, in lines, that a newcomer reads in one sitting
SITTING = 700


def test_no_module_is_longer_than_a_sitting():
    lines = {name: len(path.read_text().splitlines()) for name, (path, _) in _module_files().items()}
    assert len(lines) >= 30 and {"solvers.lagrangian", "solvers.stepping"} <= set(lines)
    over = {name: n for name, n in lines.items() if n > SITTING}
    assert not over, over


def test_the_modules_import_each_other_without_a_circle():
    """No module imports, at the top or inside a function, one that imports it back along a chain: each
    formula and type has one home below its users, so that any module can be imported first."""
    modules = _module_files()
    graph = {name: sorted(n for n in _imports(path, package) if n in modules and n != name)
             for name, (path, package) in modules.items()}
    assert len(graph) >= 30 and sum(map(len, graph.values())) >= 60          # the check saw the imports
    state: dict[str, int] = {}                       # 1: on the current chain, 2: done

    def circle_from(name: str, chain: list[str]) -> list[str] | None:
        state[name] = 1
        for n in graph[name]:
            if state.get(n) == 1:
                return chain[chain.index(n):] + [name, n] if n in chain else chain + [name, n]
            if n not in state and (found := circle_from(n, chain + [name])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = circle_from(name, [])
            assert found is None, " -> ".join(found)


def test_the_command_starts_without_dask_array_pandas_or_xarray():
    """The run layer's import (what ``attnpde run`` loads) brings in none of dask.array, xarray, pandas:
    pyfftw would import them through its dask interface whenever dask is installed (~1 s at every process
    start, spectral.fourier._import_pyfftw), and dask.array.fft still imports afterwards."""
    import subprocess
    import sys
    code = ("import sys, solvers.app.runner, solvers.app.cli\n"
            "heavy = sorted(m for m in ('dask.array', 'xarray', 'pandas') if m in sys.modules)\n"
            "print(','.join(heavy))\n"
            "import importlib.util\n"
            "if importlib.util.find_spec('dask') is not None:\n"
            "    import dask.array.fft\n"
            "    assert callable(dask.array.fft.fft)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
