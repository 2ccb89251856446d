"""Empirical measures mu = sum_j w_j delta_{x_j} on S^{d-1}: the velocity and the energy at their own points.

The particle solver moves its particles with :func:`measure_velocity`, and the PDE's Lagrangian continuation its
nodes: both are weighted point measures, and the velocity is ``Model.velocity`` of the kernel sums
(``solvers.interaction``) and the perceptron drift, defined once in ``solvers.model``.
"""
from __future__ import annotations

import numpy as np

from ._chunks import map_chunks
from .interaction import InteractionSums
from .model import Model

__all__ = ["measure_velocity", "measure_energy", "POINTWISE_CHUNK"]

#: points per chunk of the pointwise part of a velocity evaluation (:func:`measure_velocity`). A chunk is
#: about 15 numpy calls, and two threads contend for the GIL around each: 2^15 makes half as many calls
#: as 2^14, and its temporaries (up to 0.5 MiB each) still stay in the last-level cache. The velocities do
#: not depend on the chunk size
POINTWISE_CHUNK = 2 ** 15


def measure_velocity(model: Model, sums: InteractionSums | None, x: np.ndarray, w: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """v[mu](x) at the points of mu = sum_j w_j delta_{x_j} themselves (self-interaction included), and Psi
    there (None without attention): ``Model.velocity`` of the kernel sums and the perceptron drift. The
    particle solver and the PDE's Lagrangian continuation both move their points with it."""
    if sums is None:
        return model.velocity(np.zeros_like(x), None, model.drift(x)), None
    psi, G = sums.fields(x, w)

    # the pointwise part (the drift, then v = s (G + drift) in place of G) chunk by chunk on the sums'
    # threads: its temporaries stay in cache (faster than at once even on one thread) and fresh arrays of
    # N points are not paged in
    def pointwise(j: int, c: slice) -> None:
        model.velocity(G[c], psi[c, None], model.drift(x[c]), out=G[c])
    if x.shape[0] <= POINTWISE_CHUNK:
        pointwise(0, slice(None))
    else:
        map_chunks(pointwise, x.shape[0], POINTWISE_CHUNK, sums.nufft_threads, "attnpde-pointwise")
    return G, psi


def measure_energy(model: Model, sums: InteractionSums | None, x: np.ndarray, w: np.ndarray,
                   psi: np.ndarray | None) -> float:
    """E of mu = sum_j w_j delta_{x_j} (``Model.energy``; the pair term from Psi at the points)."""
    pair = sums.pair(x, w, psi) if sums is not None else 0.0
    pot = float(w @ model.potential(x)) if model.perceptron is not None and model.perceptron.is_gradient else 0.0
    return model.energy(pair, pot)
