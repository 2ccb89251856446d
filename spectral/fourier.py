"""Real Fourier basis on the circle S^1, with pyFFTW transforms planned once and reused.

A real function on S^1 is represented by its coefficients

    f(theta) = sum_{|k| < K} c_k exp(i k theta),   c_{-k} = conj(c_k),
    c_k = ∫ f(theta) exp(-i k theta) dsigma(theta),

with sigma the uniform probability measure (d theta / 2 pi). Only c_0 .. c_{K-1} are stored
("K modes"; the *degree* of the representation is K - 1). These functions are orthonormal in
L^2(sigma), so ∫ |f|^2 dsigma = |c_0|^2 + 2 sum_{k >= 1} |c_k|^2 (Parseval).

The collocation grid has M >= 3K equispaced points theta_j = 2 pi j / M (the 3/2 rule): the
product of two fields of K modes has modes up to 2K - 2, and on M >= 3K points their aliases fall
outside |k| < K, so a quadratic product is projected back exactly.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pyfftw
import scipy.fft

__all__ = ["FourierBasis", "Transform", "evaluate", "series", "interpolate", "spectral_tail", "l2_norm", "resize"]

_EFFORTS = ("FFTW_ESTIMATE", "FFTW_MEASURE", "FFTW_PATIENT", "FFTW_EXHAUSTIVE")


def _fast_size(n: int) -> int:
    """Smallest even 2^a 3^b 5^c 7^d >= n (even so the real transform has a Nyquist bin)."""
    m = scipy.fft.next_fast_len(int(n), real=True)
    while m % 2:
        m = scipy.fft.next_fast_len(m + 1, real=True)
    return m


class Transform:
    """A planned batch of real FFTs of length M over ``nfields`` rows (one FFTW plan).

    ``direction="backward"`` synthesises grid values from coefficients: fill ``spec[:, :K]``
    (the rest must be zero: call :meth:`clear_tail` if a previous execute destroyed it), call
    :meth:`execute`, read ``grid``. ``direction="forward"`` analyses: fill ``grid``, execute, read
    ``spec`` (unnormalised: coefficient c_k is ``spec[:, k] / M``).

    The buffers are owned by the plan and overwritten on every call: copy what you keep.
    """

    def __init__(self, M: int, nfields: int, direction: str, *, threads: int = 1,
                 effort: str = "FFTW_ESTIMATE") -> None:
        if direction not in ("forward", "backward"):
            raise ValueError(f"direction must be 'forward' or 'backward', got {direction!r}")
        if effort not in _EFFORTS:
            raise ValueError(f"planner effort must be one of {_EFFORTS}, got {effort!r}")
        self.M = M
        self.nfields = nfields
        self.direction = direction
        shape_g = (nfields, M)
        shape_s = (nfields, M // 2 + 1)
        self.grid = pyfftw.empty_aligned(shape_g, dtype="float64")
        self.spec = pyfftw.empty_aligned(shape_s, dtype="complex128")
        if direction == "forward":
            self._plan = pyfftw.FFTW(self.grid, self.spec, axes=(-1,), direction="FFTW_FORWARD",
                                     flags=(effort,), threads=threads)
        else:
            # c2r transforms overwrite their input; the spectral tail is re-zeroed before each use
            self._plan = pyfftw.FFTW(self.spec, self.grid, axes=(-1,), direction="FFTW_BACKWARD",
                                     flags=(effort, "FFTW_DESTROY_INPUT"), threads=threads)
        # planning with MEASURE scribbles on the arrays: start from clean buffers
        self.grid[...] = 0.0
        self.spec[...] = 0.0

    def clear_tail(self, K: int) -> None:
        """Zero the coefficients k >= K of every row (needed before a backward execute)."""
        self.spec[:, K:] = 0.0

    def execute(self) -> None:
        """Run the planned transform, unnormalised, in place on the owned buffers."""
        self._plan.execute()


class FourierBasis:
    """Fourier basis with K modes on a dealiased grid of M points.

    Parameters
    ----------
    modes : int
        Number of stored complex modes K (wavenumbers 0 .. K-1), K >= 2.
    grid_size : int, optional
        Number of collocation points M; default the smallest fast even size >= 3K.
        Must be >= 2K - 1 (exact synthesis); >= 3K for dealiased quadratic products.
    threads : int
        FFTW threads per transform.
    effort : str
        FFTW planner effort ("FFTW_ESTIMATE" is deterministic from run to run, which keeps
        restarted runs identical to uninterrupted ones; "FFTW_MEASURE" may pick faster plans).
    """

    def __init__(self, modes: int, grid_size: int | None = None, *, threads: int = 1,
                 effort: str = "FFTW_ESTIMATE") -> None:
        K = int(modes)
        if K < 2:
            raise ValueError(f"the number of Fourier modes must be >= 2, got {modes!r}")
        M = _fast_size(3 * K) if grid_size is None else int(grid_size)
        if M < 2 * K - 1 or M % 2:
            raise ValueError(f"grid_size must be even and >= 2K - 1 = {2 * K - 1}, got {grid_size!r}")
        self.K = K
        self.M = M
        self.threads = int(threads)
        self.effort = effort
        self.k = np.arange(K, dtype=float)
        self.theta = 2.0 * np.pi * np.arange(M) / M
        self._plans: dict[tuple[int, str], Transform] = {}

    # --- grid -----------------------------------------------------------------------------------
    @property
    def degree(self) -> int:
        return self.K - 1

    @property
    def points(self) -> np.ndarray:
        """Grid points as unit vectors, shape (M, 2)."""
        return np.stack([np.cos(self.theta), np.sin(self.theta)], axis=-1)

    @property
    def tangents(self) -> np.ndarray:
        """Unit tangent e_theta = (-sin, cos) at the grid points, shape (M, 2)."""
        return np.stack([-np.sin(self.theta), np.cos(self.theta)], axis=-1)

    @property
    def weights(self) -> np.ndarray:
        """Quadrature weights of the uniform probability measure on the grid (all 1/M)."""
        return np.full(self.M, 1.0 / self.M)

    @property
    def spacing(self) -> float:
        """Grid spacing h = 2 pi / M (radians)."""
        return 2.0 * np.pi / self.M

    # --- transforms -----------------------------------------------------------------------------
    def plan(self, nfields: int, direction: str) -> Transform:
        """The (cached) batch transform of ``nfields`` rows in ``direction``."""
        key = (int(nfields), direction)
        if key not in self._plans:
            self._plans[key] = Transform(self.M, int(nfields), direction, threads=self.threads,
                                         effort=self.effort)
        return self._plans[key]

    def to_grid(self, c: np.ndarray) -> np.ndarray:
        """Values on the grid of the real function with coefficients c (K,) or (n, K)."""
        c = np.asarray(c)
        rows = c.reshape(-1, c.shape[-1])
        if rows.shape[-1] > self.K:
            raise ValueError(f"expected at most {self.K} coefficients, got {rows.shape[-1]}")
        p = self.plan(rows.shape[0], "backward")
        p.spec[:, : rows.shape[-1]] = rows
        p.clear_tail(rows.shape[-1])
        p.execute()
        return p.grid.reshape(c.shape[:-1] + (self.M,)).copy()

    def from_grid(self, f: np.ndarray) -> np.ndarray:
        """Coefficients c_0..c_{K-1} of grid values f (M,) or (n, M) (trapezoidal rule, exact
        for trigonometric polynomials of degree < M - K + 1)."""
        f = np.asarray(f, dtype=float)
        rows = f.reshape(-1, self.M)
        p = self.plan(rows.shape[0], "forward")
        p.grid[...] = rows
        p.execute()
        return (p.spec[:, : self.K] / self.M).reshape(f.shape[:-1] + (self.K,))

    def derivative(self, c: np.ndarray, order: int = 1) -> np.ndarray:
        """Coefficients of d^order f / d theta^order."""
        return c * (1j * self.k[: np.shape(c)[-1]]) ** order


# --- operations on coefficients (no plans needed) -----------------------------------------------
def series(a: np.ndarray, theta: np.ndarray | Sequence[float], *, k0: int = 0) -> np.ndarray:
    """sum_j a_j exp(i (k0 + j) theta) at arbitrary angles (complex), exactly, in O(n K) work.

    The modes are taken in blocks of B = 64: exp(i k theta) = exp(i k_b theta) exp(i j theta) with
    the (points, B) matrix of exp(i j theta) formed once per block of points, each block of modes a
    matrix-vector product, and exp(i k_b theta) advanced by one multiplication per block (rounding
    grows like (K / B) eps). Memory is bounded by blocks of 2^16 points.
    """
    a = np.asarray(a, dtype=complex)
    theta = np.asarray(theta, dtype=float)
    flat = theta.ravel()
    n = a.shape[-1]
    B = min(64, max(n, 1))
    out = np.zeros(flat.size, dtype=complex)
    jj = np.arange(B)
    for s in range(0, flat.size, 1 << 16):
        th = flat[s:s + (1 << 16)]
        E = np.exp(1j * np.outer(th, jj))
        step = np.exp(1j * B * th)
        phase = np.exp(1j * k0 * th)
        acc = np.zeros(th.size, dtype=complex)
        for b in range(0, n, B):
            blk = a[b:b + B]
            acc += phase * (E[:, :blk.size] @ blk)
            phase *= step
        out[s:s + th.size] = acc
    return out.reshape(theta.shape)


def evaluate(c: np.ndarray, theta: np.ndarray | Sequence[float]) -> np.ndarray:
    """f(theta) = c_0 + 2 Re sum_{k>=1} c_k exp(i k theta) at arbitrary angles by direct summation."""
    c = np.asarray(c)
    w = c.astype(complex)
    w[1:] *= 2.0
    return series(w, theta).real


def interpolate(c: np.ndarray, npoints: int) -> np.ndarray:
    """f on the equispaced grid theta_j = 2 pi j / npoints (exact: an FFT of a multiple size, subsampled)."""
    c = np.asarray(c)
    n = c.shape[-1]
    factor = max(1, math.ceil((2 * n) / npoints))
    big = npoints * factor
    if big % 2:
        big *= 2
        factor *= 2
    spec = np.zeros(c.shape[:-1] + (big // 2 + 1,), dtype=complex)
    spec[..., :n] = c
    vals = scipy.fft.irfft(spec, n=big, axis=-1, norm="forward")
    return vals[..., ::factor].copy()


def spectral_tail(c: np.ndarray, fraction: float = 1.0 / 3.0) -> float:
    """Relative L^2 size of the top ``fraction`` of the spectrum: sqrt(E_tail / E_total)."""
    a2 = np.abs(np.asarray(c)) ** 2
    a2[1:] *= 2.0
    cut = int(math.floor((1.0 - fraction) * a2.shape[-1]))
    total = a2.sum()
    return float(math.sqrt(a2[cut:].sum() / total)) if total > 0 else 0.0


def l2_norm(c: np.ndarray) -> float:
    """||f||_{L^2(sigma)} from the coefficients (Parseval)."""
    a2 = np.abs(np.asarray(c)) ** 2
    return float(math.sqrt(a2[0] + 2.0 * a2[1:].sum()))


def resize(c: np.ndarray, K: int) -> np.ndarray:
    """The same function with K modes (zero-padding is exact; truncation drops modes >= K)."""
    out = np.zeros(np.shape(c)[:-1] + (K,), dtype=complex)
    n = min(K, np.shape(c)[-1])
    out[..., :n] = np.asarray(c)[..., :n]
    return out
