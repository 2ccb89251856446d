"""attnpde solvers: the model (README, The model §1) and what evolves it.

Public names: :class:`Model`, :class:`Perceptron`, :func:`solve_pde` (spectral PDE on S^1 and S^2),
:func:`simulate_particles` (particles on S^{d-1}, any d, with fast interaction sums on S^1 and S^2),
:func:`compare` (PDE against particles: distances, matched atoms).
"""
from .comparison import Comparison, compare
from .model import Model
from .particles import ParticleResult, simulate_particles
from .perceptron import Perceptron
from .pde import PDEResult, solve_pde

__all__ = ["Model", "Perceptron", "solve_pde", "PDEResult", "simulate_particles", "ParticleResult",
           "compare", "Comparison"]
__version__ = "0.1.0"
