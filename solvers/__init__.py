"""attnpde solvers: the model (docs/model.md §1) and what evolves it.

Public names: :class:`Model`, :class:`Perceptron`, :func:`solve_pde` (spectral PDE on S^1 and S^2),
:func:`simulate_particles` (particles on S^{d-1}, any d, with fast interaction sums on S^1 and S^2),
:func:`compare` (PDE against particles: distances, matched atoms), :func:`atomic_state` (stability of an atomic
stationary state) and :func:`polish_atoms` (Newton's method for one); with noise, :func:`stationary_state`,
:func:`branch_from_uniform` and :func:`continue_branch` (stationary states, their branches in the noise and
the phase transitions: :class:`StationaryState`, :class:`Branch`); :func:`extremum` (the global extremum of the
energy, certified: :class:`Extremum`) and :func:`compare_end` (a flow's end beside it: :class:`EndVsExtremum`).
"""
import importlib

# The public names are imported on first use (PEP 562): importing a submodule, as the ``attnpde`` command
# does before its own code runs, then costs nothing, so that the command answers --help and bad arguments
# at once and a Ctrl-C during its imports reaches the command's handler (exit 130, no traceback).
_HOMES = {"Model": ".model", "Perceptron": ".perceptron", "solve_pde": ".pde", "PDEResult": ".pde",
          "simulate_particles": ".particles", "ParticleResult": ".particles", "compare": ".comparison",
          "Comparison": ".comparison", "atomic_state": ".atomic", "AtomicState": ".atomic",
          "polish_atoms": ".balance", "stationary_state": ".stationary", "branch_from_uniform": ".branches",
          "continue_branch": ".branches", "Branch": ".branches", "StationaryState": ".stationary",
          "extremum": ".landscape", "Extremum": ".landscape", "compare_end": ".landscape_end",
          "EndVsExtremum": ".landscape_end"}

__all__ = ["Model", "Perceptron", "solve_pde", "PDEResult", "simulate_particles", "ParticleResult",
           "compare", "Comparison", "atomic_state", "AtomicState", "polish_atoms", "stationary_state",
           "branch_from_uniform", "continue_branch", "Branch", "StationaryState", "extremum", "Extremum",
           "compare_end", "EndVsExtremum"]


def _version() -> str:
    """The installed distribution's version: pyproject.toml's ``version`` is its only home. A source tree
    imported without being installed has no metadata and reports ``0+unknown``."""
    from importlib import metadata
    try:
        return metadata.version("attnpde")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":                  # read once, on first use, like the public names
        globals()[name] = value = _version()
        return value
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})
