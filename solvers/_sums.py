"""What the interaction sums' modules share (:mod:`solvers.interaction`, :mod:`solvers.interaction_sphere`):
the defaults, the checks of their arguments, and the compiled sums' chunks.

The compiled sums (``solvers/_kernels.c``) add their coefficients over fixed chunks of SERIES_CHUNK points in
chunk order and evaluate each point on its own, so that the chunks may run on threads (the loops release the
GIL) without changing a bit.
"""
from __future__ import annotations

import numpy as np

from ._chunks import map_chunks

#: multipliers below this fraction of lambda_0 are dropped by the series sums
DEFAULT_TOL = 1e-17
#: the smallest precision asked of ducc0's transforms (its floor in double precision is 2e-13). At 1e-12 the S^2
#: sums were within 1e-12 of the direct ones (relative to max |G|), but their errors are not symmetric about
#: the equator, and particles on it (whose exact field is tangent to it) left it by 2.6e-14 in 200 RK4 steps;
#: 3e-13 takes a kernel one point wider on S^2 (none on S^1) and keeps them within 3e-15
NUFFT_EPS_MIN = 3e-13
#: the cost model takes the chunks of a pass (the NUFFT's, the compiled series') as run this many at a time (the
#: 2-core machines it was measured on), whatever the thread count: the method auto picks, and so the bits of the
#: sums, never depend on the threads (a run resumed with other threads continues bit for bit)
NUFFT_COST_THREADS = 2
#: points per call of the compiled sums: their coefficients are added in chunks of this many sources (in chunk
#: order, so that the result depends on the point count only), and chunks run on threads when there are several
SERIES_CHUNK = 2 ** 13


def as_points(name: str, a, d: int | None = None) -> np.ndarray:
    """a as a C-contiguous float array of shape (n, d) (ValueError otherwise)."""
    a = np.ascontiguousarray(a, dtype=float)
    if a.ndim != 2 or (d is not None and a.shape[1] != d):
        want = f"(n, {d})" if d is not None else "(n, d)"
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    return a


def as_weights(w, n: int) -> np.ndarray:
    """The weights of n sources as a flat contiguous float array (ValueError unless there is one per source)."""
    w = np.ascontiguousarray(w, dtype=float).reshape(-1)
    if w.shape != (n,):
        raise ValueError(f"w must have one weight per source ({n}), got shape {w.shape}")
    return w


def chunk_sum(one, n: int, threads: int, name: str) -> np.ndarray:
    """The sum of ``one(j, slice_j)`` over the chunks of SERIES_CHUNK of n points, in chunk order (computed
    ``threads`` at a time)."""
    parts = map_chunks(one, n, SERIES_CHUNK, threads, name)
    total = parts[0]
    for p in parts[1:]:
        total += p
    return total


def chunk_rounds(n: int, chunk: int, threads: int) -> int:
    """Points of the longest thread when the chunks of ``chunk`` of n points run ``threads`` at a time (a round
    waits for its longest chunk): what a cost model charges for a pass over n points."""
    chunks = -(-max(n, 1) // chunk)
    return min(n, -(-chunks // threads) * chunk)


class SeriesSums:
    """The compiled series sums' shared pass (:class:`solvers.interaction.CircleSums`,
    :class:`solvers.interaction_sphere.SphereSums`): the coefficients of the sources, summed over chunks of
    SERIES_CHUNK in chunk order, then the fields at each evaluation point on its own. A subclass sets ``d``,
    ``threads`` and ``ncoef`` and gives the two compiled loops."""

    d: int
    threads: int
    ncoef: int

    def _coefficients_into(self, y: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def _evaluate_into(self, x: np.ndarray, c: np.ndarray, psi: np.ndarray, G: np.ndarray) -> None:
        raise NotImplementedError

    def coefficients(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The series coefficients (``ncoef`` complex) of the sources y (N, d) with weights w."""
        y = as_points("y", y, self.d)
        w = as_weights(w, y.shape[0])

        def one(j: int, c: slice) -> np.ndarray:
            out = np.empty(self.ncoef, dtype=complex)
            self._coefficients_into(y[c], w[c], out)
            return out
        if y.shape[0] <= SERIES_CHUNK:                 # one chunk (the common case): no closure, no pool
            return one(0, slice(None))
        return chunk_sum(one, y.shape[0], self.threads, "attnpde-series")

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, d) at x (default: at the sources y)."""
        y = as_points("y", y, self.d)
        x = y if x is None else as_points("x", x, self.d)
        c = self.coefficients(y, w)
        psi, G = np.empty(x.shape[0]), np.empty_like(x)
        if x.shape[0] <= SERIES_CHUNK:
            self._evaluate_into(x, c, psi, G)
        else:
            map_chunks(lambda j, s: self._evaluate_into(x[s], c, psi[s], G[s]), x.shape[0], SERIES_CHUNK,
                       self.threads, "attnpde-series")
        return psi, G
