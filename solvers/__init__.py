"""attnpde solvers: the model of SPEC §1 and what evolves it.

Public names: :class:`Model`, :class:`Perceptron`, :func:`solve_pde` (spectral PDE on S^1 and S^2).
"""
from .model import Model
from .perceptron import Perceptron
from .pde import PDEResult, solve_pde

__all__ = ["Model", "Perceptron", "solve_pde", "PDEResult"]
__version__ = "0.1.0"
