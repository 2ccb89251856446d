"""The two rooms: the numerics (``spectral``, ``solvers`` outside ``solvers.app``) import nothing of the run
layer (``solvers.app``) nor its tools (HDF5, plotting, argument parsing, TOML); the run layer may import the
numerics. Checked on the import statements of every module, as written."""
import ast
import importlib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what the numerics may not import: the run layer and its tools
FORBIDDEN = ("solvers.app", "h5py", "matplotlib", "argparse", "tomllib", "tomli")
#: aliases of the modules that moved into solvers.app (kept for one release, each a deprecation warning)
MOVED = ("config", "runner", "archive", "cli", "info", "plots", "sweep", "validate")


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
    files += [(p, "solvers") for p in (ROOT / "solvers").glob("*.py") if p.stem not in MOVED]
    return files


def test_the_numerics_do_not_import_the_run_layer():
    offenders = []
    for path, package in _numerics():
        for name in _imports(path, package):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(offenders)
    assert len(_numerics()) >= 15                         # the check saw the modules


def test_the_run_layer_lives_in_solvers_app():
    app = {p.stem for p in (ROOT / "solvers" / "app").glob("*.py")}
    assert set(MOVED) <= app


@pytest.mark.parametrize("name", MOVED)
def test_old_import_paths_still_work_with_a_deprecation_warning(name):
    import sys
    sys.modules.pop(f"solvers.{name}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module(f"solvers.{name}")
    assert old is importlib.import_module(f"solvers.app.{name}")
    assert any(issubclass(w.category, DeprecationWarning) and f"solvers.app.{name}" in str(w.message) for w in caught)
