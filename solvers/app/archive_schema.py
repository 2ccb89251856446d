"""What an archive's names mean: the format, the groups' per-snapshot series, the named dimensions of every
dataset and their CF attributes (the netCDF-4 / xarray view), and which command wrote an archive.

Nothing here opens a file: the writer and the reader take their names from these tables.
"""
from __future__ import annotations

import fnmatch
import functools

FORMAT = "attnpde-run"
#: 3: restart arrays in two slots (restart/a, restart/b); 2: named dimensions; 1: neither. The checksums
#: (attribute ``checksums`` at the root) are an addition a reader of version 3 ignores, not a new layout.
FORMAT_VERSION = 3
#: what the root attribute ``checksums`` says of an archive that carries them (read: they are verified)
CHECKSUMS = "fletcher32+crc32"
COMPRESSIONS = ("density", "all", "none")
#: the datasets each compression setting compresses (gzip 1 with byte shuffling)
COMPRESSED = {"none": frozenset(), "density": frozenset({"density"}), "all": frozenset({"density", "coeffs", "x"})}

# fields appended once per snapshot, per section
PDE_SERIES = ("energy", "mass", "min_density", "tail", "dissipation")
STEP_KEYS = ("t", "dt", "error", "accepted")
PARTICLE_SERIES = ("energy", "max_drift", "dissipation", "step_stiffness")

#: the text of a netCDF-4 "dimension without a variable" (its NAME attribute, padded with its id)
PURE_DIM = "This is a netCDF dimension but not a netCDF variable."

# dimensions by group and dataset name (fnmatch patterns; "*" is the default of a group); MODE and GRID
# stand for the coefficient and output-grid axes of the manifold (MODE_DIMS, GRID_DIMS)
DIMS: dict[str, dict] = {
    "pde": {"coeffs": ("t", "MODE"), "density": ("t", "GRID"), "grid": ("GRID", "component"),
            "refinements": ("refinement", "refinement_field"), "grids": ("grid_record", "grid_field"),
            "l": ("mode",), "m": ("mode",), "k": ("k",), "theta": ("theta",), "lat": ("lat",), "lon": ("lon",),
            "*": ("t",)},
    "pde/steps": {"*": ("step",)},
    "pde/lagrangian": {"x": ("node", "component"), "w": ("node",), "count": ("node",),
                       "merges": ("merge", "merge_field"), "*": ("t",)},
    "pde/lagrangian/check": {"x": ("node", "component"), "*": ("node",)},
    "pde/terminal": {"positions": ("atom", "component"), "eigenvalues*": ("eigenvalue",), "*": ("atom",)},
    "pde/plateaus": {"positions": ("plateau_atom", "component"), "direction": ("plateau_atom", "component"),
                     "masses": ("plateau_atom",), "*": ("plateau",)},
    "pde/stages": {"position": ("stage", "component"), "*": ("stage",)},
    "pde/restart*": {"coeffs": ("coeff",), "handoff_coeffs": ("handoff_coeff",), "good_coeffs": ("good_coeff",),
                     "x": ("node", "component"), "w": ("node",), "count": ("node",)},
    "particles": {"x": ("t", "particle", "component"), "w": ("particle",), "*": ("t",)},
    "particles/restart*": {"x": ("particle", "component"), "*": ("particle",)},
    "atoms/*": {"positions": ("atom", "component"), "*": ("atom",)},
    "comparison": {"matched_*_positions": ("match", "component"), "matched_*": ("match",),
                   "unmatched_pde_positions": ("unmatched_pde", "component"), "unmatched_pde_*": ("unmatched_pde",),
                   "unmatched_particles_positions": ("unmatched_particles", "component"),
                   "unmatched_particles_*": ("unmatched_particles",), "*": ("t",)},
    "comparison/concentration_*": {"final_atom_positions": ("atom", "component"), "final_atom_masses": ("atom",),
                                   "*": ("t",)},
    "validation": {"n": ("n",), "seed": ("seed",), "t": ("t",), "wall": ("n", "seed"),
                   "stop_reason": ("n", "seed"), "*": ("n", "seed", "t")},
    "model/perceptron": {"a": ("unit", "component"), "w": ("unit", "component"), "*": ("unit",)},
}
MODE_DIMS = {2: ("k",), 3: ("mode",)}
GRID_DIMS = {2: ("theta",), 3: ("lat", "lon")}

#: what each dimension without a coordinate counts: the attributes of its placeholder dataset, which holds no
#: data (netCDF-4 stores such a dimension as an empty dataset; its length is that of the variables using it)
DIMENSION_NOTES = {
    "component": "Cartesian component of a unit vector in R^d",
    "particle": "particle (its index in the initial sample)",
    "node": "node of the continuation's node measures, all snapshots one after another (see node_count)",
    "atom": "atom (heaviest first)",
    "unit": "perceptron unit",
    "step": "attempted step of the spectral integration, in order",
    "mode": "canonical harmonic coefficient, index l(l+1)/2 + m (coordinates l and m)",
    "coeff": "canonical coefficient of the restart state",
    "handoff_coeff": "canonical coefficient of the handoff state",
    "good_coeff": "canonical coefficient of the last resolved state (tail <= tail_tol: where a handoff starts)",
    "match": "pair of matched PDE and particle atoms",
    "unmatched_pde": "PDE atom without a particle atom",
    "unmatched_particles": "particle atom without a PDE atom",
    "refinement": "refinement of the resolution, in order",
    "refinement_field": "field of a refinement record: t, old degree, new degree",
    "grid_record": "resolution used, in order of first use",
    "grid_field": "field of a grid record: degree, then the grid sizes (M on S^1; nlat, nphi on S^2)",
    "merge": "step of the continuation at which nodes merged",
    "merge_field": "field of a merge record: t, nodes before, nodes after",
    "eigenvalue": "non-neutral eigenvalue of the terminal state's linearisation",
    "plateau": "plateau (saddle) the flow passed, in order",
    "plateau_atom": "atom of a plateau, all plateaus one after another (see natoms)",
    "stage": "slow stage of the flow (nodes slow, forces unbalanced), in order",
}

# CF-style attributes (units "1": dimensionless; time is the depth of the Transformer, in layers)
CF = {
    "t": dict(long_name="time (depth, in layers)", units="1"),
    "k": dict(long_name="Fourier wavenumber (c_k, k >= 0; c_{-k} = conj(c_k))", units="1"),
    "l": dict(long_name="spherical-harmonic degree", units="1"),
    "m": dict(long_name="spherical-harmonic order (m >= 0; orthonormal harmonics, area measure)", units="1"),
    "theta": dict(long_name="angle on the circle", units="radian"),
    "lat": dict(standard_name="latitude", long_name="latitude", units="degrees_north"),
    "lon": dict(standard_name="longitude", long_name="longitude", units="degrees_east"),
    "coeffs": dict(long_name="spectral coefficients of rho (canonical layout)", units="1"),
    "density": dict(long_name="density of rho with respect to the uniform probability measure", units="1"),
    "grid": dict(long_name="output grid points (unit vectors)", units="1"),
    "degree": dict(long_name="resolution (Fourier modes K on S^1, harmonic degree L on S^2)", units="1"),
    "energy": dict(long_name="energy of the gradient flow", units="1"),
    "mass": dict(long_name="total mass", units="1"),
    "min_density": dict(long_name="minimum of the density on the computational grid", units="1"),
    "tail": dict(long_name="relative spectral tail", units="1"),
    "dissipation": dict(long_name="energy dissipation rate", units="1"),
    "max_drift": dict(long_name="largest speed of the points (particles, or the continuation's nodes)", units="1"),
    "step_stiffness": dict(long_name="largest h |dv|/|dx| of the fixed steps since the previous snapshot "
                                     "(above the integrator's stability bound: beyond it)", units="1"),
    "x": dict(long_name="positions (unit vectors)", units="1"),
    "w": dict(long_name="weights", units="1"),
    "count": dict(long_name="initial nodes merged into each node", units="1"),
    "node_count": dict(long_name="nodes of each snapshot (CF contiguous ragged array)", sample_dimension="node"),
    "snapshot": dict(long_name="row in /pde of each node snapshot", units="1"),
    "merges": dict(long_name="merge steps of the nodes (t, nodes before, nodes after)", units="1"),
    "refinements": dict(long_name="refinements of the resolution (t, old degree, new degree)", units="1"),
    "grids": dict(long_name="computational grid of each degree used (degree, grid sizes)", units="1"),
    "dt": dict(long_name="attempted step size", units="1"),
    "error": dict(long_name="scaled error estimate of the attempted step (<= 1: accepted)", units="1"),
    "accepted": dict(long_name="whether the attempted step was accepted"),
    "n_clusters": dict(long_name="clusters of the particles (-1: not counted)", units="1"),
    "positions": dict(long_name="atom positions (unit vectors)", units="1"),
    "masses": dict(long_name="atom masses", units="1"),
    "counts": dict(long_name="nodes in each atom", units="1"),
    "extents": dict(long_name="largest distance of an atom's nodes from its position", units="radian"),
    "mass_errors": dict(long_name="error estimate of the atom masses (rerun at twice the nodes)", units="1"),
    "position_errors": dict(long_name="error estimate of the atom positions (rerun at twice the nodes)",
                            units="radian"),
    "handoff_coeffs": dict(long_name="spectral coefficients of the handoff state (canonical layout)", units="1"),
    "good_coeffs": dict(long_name="spectral coefficients of the last resolved state (canonical layout)", units="1"),
    # /pde/terminal and /pde/plateaus (solvers.terminal)
    "displacement": dict(long_name="how far polishing moved each atom", units="radian"),
    "eigenvalues": dict(long_name="non-neutral eigenvalues of the linearisation (real parts; > 0: unstable)",
                        units="1"),
    "eigenvalues_imag": dict(long_name="imaginary parts of the eigenvalues", units="1"),
    "t_entered": dict(long_name="time the flow entered the plateau (energy within 1e-3 of its drop) or the slow "
                                "stage (the attempt that found it)", units="1"),
    "t_left": dict(long_name="time the flow left the slow stage (nan: still in it)", units="1"),
    "speed": dict(long_name="speed of the slowest unbalanced atom of the slow stage", units="radian"),
    "scale": dict(long_name="size of the forces on that atom (the sum of their norms)", units="radian"),
    "t_move": dict(long_name="time that atom would take at that speed to move one grouping radius", units="1"),
    "why": dict(long_name="why the slow stage was not certified"),
    "position": dict(long_name="position of the slow stage's slowest unbalanced atom (unit vector)", units="1"),
    "residuals": dict(long_name="speed |v| at each atom after Newton's method", units="radian"),
    "scales": dict(long_name="size of the forces at each atom (the sum of their norms)", units="radian"),
    "dead": dict(long_name="the atom sits in a dead zone (no perceptron unit acts there): 1, else 0"),
    "underflow": dict(long_name="every force on the atom underflows the floating-point range: 1, else 0"),
    "t_certified": dict(long_name="time the plateau was certified", units="1"),
    "growth": dict(long_name="largest growth rate of the plateau's linearisation", units="1"),
    "atom": dict(long_name="the atom of a pull instability (-1: the atoms as a system), or of a slow stage",
                 units="1"),
    "atoms": dict(long_name="atoms of the slow stage's state", units="1"),
    "atom_mass": dict(long_name="mass of the slow stage's slowest unbalanced atom", units="1"),
    "kick": dict(long_name="the perturbation along the unstable direction", units="radian"),
    "part": dict(long_name="where the instability is: atoms (the reduced system) or pull (one atom's)"),
    "natoms": dict(long_name="atoms of each plateau (CF contiguous ragged array)", sample_dimension="plateau_atom"),
    "direction": dict(long_name="unstable direction (tangent displacement of each atom)", units="radian"),
    # /comparison and its concentration_* (solvers.comparison)
    "w1": dict(long_name="1-Wasserstein distance between the PDE and the particles (arc length)", units="radian"),
    "mmd": dict(long_name="kernel distance (MMD) between the PDE and the particles", units="1"),
    "moment_gap": dict(long_name="largest gap between the PDE's and the particles' coefficients", units="1"),
    "energy_gap": dict(long_name="|energy of the PDE - energy of the particles|", units="1"),
    "cdf_drift": dict(long_name="largest change of the particles' CDF values (0 on characteristics)", units="1"),
    "matched_pde_positions": dict(long_name="PDE atoms matched to particle atoms (unit vectors)", units="1"),
    "matched_particle_positions": dict(long_name="particle atoms matched to PDE atoms (unit vectors)", units="1"),
    "matched_pde_mass": dict(long_name="PDE mass within atom_radius of its matched atom", units="1"),
    "matched_particle_mass": dict(long_name="particle mass within atom_radius of its matched atom", units="1"),
    "matched_position_error": dict(long_name="distance between matched atoms", units="radian"),
    "unmatched_pde_positions": dict(long_name="PDE atoms without a particle atom (unit vectors)", units="1"),
    "unmatched_pde_masses": dict(long_name="masses of the PDE atoms without a particle atom", units="1"),
    "unmatched_particles_positions": dict(long_name="particle atoms without a PDE atom (unit vectors)", units="1"),
    "unmatched_particles_masses": dict(long_name="masses of the particle atoms without a PDE atom", units="1"),
    "mass_near_atoms": dict(long_name="mass within the atom radius of the final atoms", units="1"),
    "effective_support": dict(long_name="measure of the smallest union of cells holding 1 - eps of the mass",
                              units="1"),
    "l2": dict(long_name="integral of rho^2 over the cells of a fixed partition", units="1"),
    "final_atom_positions": dict(long_name="atoms at the last common time (unit vectors)", units="1"),
    "final_atom_masses": dict(long_name="masses of the atoms at the last common time", units="1"),
    # /validation
    "n": dict(long_name="particle count N", units="1"),
    "seed": dict(long_name="seed of the particles' initial sample", units="1"),
    "wall": dict(long_name="wall time of the particle run", units="s"),
    "stop_reason": dict(long_name="stop reason of the particle run"),
    # /model/perceptron (w: the vector output weights of the general form, "weights" above)
    "a": dict(long_name="unit directions a_k of the perceptron", units="1"),
    "b": dict(long_name="biases b_k of the perceptron", units="1"),
    "c": dict(long_name="scalar output weights c_k of the perceptron (gradient form)", units="1"),
}

#: the node measures of /pde/lagrangian: one ragged array (CF "contiguous ragged array"), said in the file
RAGGED = ("the node measures of all node snapshots, one after another along the dimension node: node "
          "snapshot i (row snapshot[i] of /pde, time t[i]) holds node_count[i] nodes, the rows "
          "sum(node_count[:i]) to sum(node_count[:i+1]) - 1 of x, w and count; "
          "numpy: np.split(x, np.cumsum(node_count)[:-1])")
RAGGED_CF = {"x": dict(long_name="node positions of every node snapshot (unit vectors; ragged, see node_count)",
                       units="1", description=RAGGED),
             "w": dict(long_name="node weights (masses) of every node snapshot (ragged, see node_count)", units="1",
                       description=RAGGED),
             "count": dict(long_name="initial nodes merged into each node of every node snapshot (ragged, see "
                                     "node_count)", units="1", description=RAGGED)}


def cf_attributes(path: str, name: str) -> dict:
    """The CF attributes of dataset ``name`` in group ``path``."""
    if path == "pde/lagrangian" and name in RAGGED_CF:
        return RAGGED_CF[name]
    return CF.get(name, {})


@functools.lru_cache(maxsize=512)
def dims_of(path: str, name: str, ndim: int, d: int) -> tuple:
    """The named dimensions of dataset ``name`` (``ndim`` axes) in group ``path`` of an archive on S^{d-1}."""
    table = next((v for k, v in DIMS.items() if fnmatch.fnmatchcase(path, k)), {})
    dims = next((v for k, v in table.items() if k != "*" and fnmatch.fnmatchcase(name, k)), table.get("*"))
    dims = sum(((MODE_DIMS[d] if x == "MODE" else GRID_DIMS[d] if x == "GRID" else (x,)) for x in dims or ()), ())
    if len(dims) != ndim:                   # a dataset the table does not know: named after itself
        dims = tuple(f"{name}_{i}" for i in range(ndim))
    return dims


#: how the ``command`` attribute of a sweep's member and of a validate study begins (the command line as
#: typed, or these alone when called from Python): what :func:`made_by` reads
SWEEP_COMMAND, VALIDATE_COMMAND = "attnpde sweep", "attnpde validate"


def made_by(command: str) -> str:
    """Which command wrote an archive, from its ``command`` attribute: "sweep" (a member of ``attnpde sweep``,
    which resumes it with ``sweep --resume``), "validate" (a study that does not resume), or "run"
    (``attnpde run``, or ``run_config`` from Python, resumed by ``run --resume``)."""
    if command.startswith(SWEEP_COMMAND):
        return "sweep"
    if command.startswith(VALIDATE_COMMAND):
        return "validate"
    return "run"


def software_version() -> str:
    """attnpde's version (``solvers.__version__``): an archive's ``software_version``. A version changes
    when this package's own numerical choices change a run's round-off (a resume by another version says
    so, as for other libraries)."""
    from .. import __version__
    return __version__


@functools.lru_cache(maxsize=1)
def libraries() -> str:
    """The versions of the libraries a run's numbers go through, and the CPU ("numpy 2.4.6, scipy ...;
    x86_64 Intel(R) Xeon(R) ..."). The grids, plans and sizes are fixed by the configuration; the
    round-off is not: it depends on these (their SIMD kernels order sums differently), so an archive
    says which ones made it. Read from the modules the package has already imported."""
    import platform

    import ducc0
    import finufft
    import h5py
    import numpy as np
    import pyfftw
    import scipy

    from spectral.sphere import shtns
    mods = [("numpy", np), ("scipy", scipy), ("pyfftw", pyfftw), ("shtns", shtns), ("finufft", finufft),
            ("ducc0", ducc0), ("h5py", h5py)]
    text = ", ".join(f"{name} {getattr(m, '__version__', '?')}" for name, m in mods)
    text += f", HDF5 {h5py.version.hdf5_version}"
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{text}; {platform.machine()} {cpu or platform.processor()}".rstrip()


# --- checksums ------------------------------------------------------------------------------------------
def to_json(obj) -> str:
    """JSON with sorted keys; numpy arrays and scalars as plain lists and numbers."""
    import json

    import numpy as np

    def default(o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        return repr(o)
    return json.dumps(obj, default=default, sort_keys=True)


def crc(values, start: int = 0) -> int:
    """CRC-32 of an array's bytes in C order (as HDF5 returns them: native byte order), continuing ``start``."""
    import zlib

    import numpy as np
    return zlib.crc32(np.ascontiguousarray(values).reshape(-1).view(np.uint8).data, start)      # (no copy)


def digest(state: dict) -> int:
    """The digest a restart state carries: CRC-32 of its JSON (sorted keys) without the digest itself."""
    import zlib
    return zlib.crc32(to_json({k: v for k, v in state.items() if k != "digest"}).encode())
