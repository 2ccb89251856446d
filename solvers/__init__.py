"""attnpde solvers: the model (README, The model §1) and what evolves it.

Public names: :class:`Model`, :class:`Perceptron`, :func:`solve_pde` (spectral PDE on S^1 and S^2),
:func:`simulate_particles` (particles on S^{d-1}, any d, with fast interaction sums on S^1 and S^2),
:func:`compare` (PDE against particles: distances, matched atoms).
"""
import importlib

# The public names are imported on first use (PEP 562): importing a submodule, as the ``attnpde`` command
# does before its own code runs, then costs nothing, so that the command answers --help and bad arguments
# at once and a Ctrl-C during its imports reaches the command's handler (exit 130, no traceback).
_HOMES = {"Model": ".model", "Perceptron": ".perceptron", "solve_pde": ".pde", "PDEResult": ".pde",
          "simulate_particles": ".particles", "ParticleResult": ".particles", "compare": ".comparison",
          "Comparison": ".comparison"}

__all__ = ["Model", "Perceptron", "solve_pde", "PDEResult", "simulate_particles", "ParticleResult",
           "compare", "Comparison"]
__version__ = "0.1.4"


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
