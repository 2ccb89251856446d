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
import os
import threading
from typing import Sequence

import numpy as np
import scipy.fft


class _HideDask:
    """A meta-path finder that, in the one thread importing pyfftw (:func:`_import_pyfftw`), answers that
    dask does not exist; every other import, and every other thread's, goes on to the next finder."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, name, path=None, target=None):
        if (name == "dask" or name.startswith("dask.")) and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden while pyfftw is imported)", name=name)
        return None


def _import_pyfftw():
    """Import pyfftw without its dask interface.

    pyfftw's ``__init__`` imports ``pyfftw.interfaces``, which imports ``dask.array.fft`` whenever dask
    is installed (the ``cluster`` extra), and with it xarray and pandas: about a second at every start of
    a process, paid by every command, sweep worker and subprocess of the tests. Only ``pyfftw.FFTW`` and
    aligned allocation are used here. While pyfftw is imported, a finder first in ``sys.meta_path`` tells
    the importing thread that dask does not exist (pyfftw then skips its dask interface, as without dask);
    other threads import dask as usual meanwhile, and the finder is removed afterwards. A dask not yet
    imported is not imported; one already imported is used by pyfftw as it would be. So
    ``pyfftw.interfaces.dask_fft`` is not an attribute after this import (``import
    pyfftw.interfaces.dask_fft`` still imports it)."""
    import sys

    if "pyfftw" in sys.modules:
        return sys.modules["pyfftw"]
    hide = _HideDask()
    sys.meta_path.insert(0, hide)
    try:
        import pyfftw as module
    finally:
        sys.meta_path.remove(hide)
    return module


pyfftw = _import_pyfftw()

__all__ = ["FourierBasis", "Transform", "dealiased_size", "inverse_cdf", "evaluate", "series", "point_coefficients",
           "interpolate", "spectral_tail", "l2_norm", "resize"]

_EFFORTS = ("FFTW_ESTIMATE", "FFTW_MEASURE", "FFTW_PATIENT", "FFTW_EXHAUSTIVE")


def _fast_size(n: int) -> int:
    """Smallest even 5-smooth integer 2^a 3^b 5^c >= n (scipy's ``next_fast_len`` for real transforms,
    a fixed table: even so the real transform has a Nyquist bin)."""
    m = scipy.fft.next_fast_len(int(n), real=True)
    while m % 2:
        m = scipy.fft.next_fast_len(m + 1, real=True)
    return m


def dealiased_size(K: int) -> int:
    """The collocation grid M of K modes: the smallest even 5-smooth M >= 3K (3/2 rule). A function of K
    alone, the same on every machine."""
    return _fast_size(3 * int(K))


#: planner flags added to every plan made here: ``("FFTW_UNALIGNED",)`` when the environment variable
#: ATTNPDE_FFTW_UNALIGNED is "1" at import, else none. FFTW_UNALIGNED forbids plans that need aligned arrays,
#: which keeps FFTW to its codelets without SIMD (other bits than the SIMD codelets this CPU would get); the
#: foreign-SIMD lane of the tests (``scripts/test --foreign-simd``) plans so. Transforms are then slower.
EXTRA_FLAGS: tuple[str, ...] = ("FFTW_UNALIGNED",) if os.environ.get("ATTNPDE_FFTW_UNALIGNED") == "1" else ()

#: whether pyFFTW's wisdom may hold plans of a timed planning, which an FFTW_ESTIMATE plan would reuse
#: (see :class:`Transform`): unknown at the start of a process, then set by every plan made here
_timed_wisdom = True
_planning = threading.Lock()


def _plan(src: np.ndarray, dst: np.ndarray, direction: str, flags: tuple, threads: int):
    """An FFTW plan along the last axis; an FFTW_ESTIMATE plan is made from wisdom without timed plans in it
    (forgotten first when a timed planning may have left some: :class:`Transform`)."""
    global _timed_wisdom
    with _planning:
        estimate = flags[0] == "FFTW_ESTIMATE"
        if estimate and _timed_wisdom:
            pyfftw.forget_wisdom()
        plan = pyfftw.FFTW(src, dst, axes=(-1,), direction=direction, flags=flags + EXTRA_FLAGS, threads=threads)
        _timed_wisdom = not estimate
        return plan


class Transform:
    """A planned batch of real FFTs of length M over ``nfields`` rows (one FFTW plan).

    ``direction="backward"`` synthesises grid values from coefficients: fill ``spec[:, :K]``
    (the rest must be zero: call :meth:`clear_tail` if a previous execute destroyed it), call
    ``execute()``, read ``grid``. ``direction="forward"`` analyses: fill ``grid``, execute, read
    ``spec`` (unnormalised: coefficient c_k is ``spec[:, k] / M``).

    The buffers are owned by the plan and overwritten on every call: copy what you keep.

    ``effort="FFTW_ESTIMATE"`` (the default) gives the same plan, hence the same bits, on every run: FFTW
    would otherwise use any plan of the same size that an earlier, timed planning (FFTW_MEASURE and up)
    left in the process's wisdom (the FFTW manual, "Planner Flags"), so a process that planned with a
    higher effort once (an earlier run in the same process or Dask worker) would change the round-off of
    the later ESTIMATE plans. Planning with FFTW_ESTIMATE therefore first forgets pyFFTW's
    wisdom when a timed planning may have left some: at the first plan of the process, and after each
    timed plan made here (:func:`_plan`). Wisdom that only ESTIMATE plannings left is kept: it gives the
    plan a fresh planner gives (tested bit for bit over sizes, batch counts, directions and orders), and
    planning without it costs some fifty times as long. A process that plans pyFFTW transforms with a timed effort
    itself, outside this module, calls ``pyfftw.forget_wisdom()`` before its next run to keep that run's bits.
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
            self._plan = _plan(self.grid, self.spec, "FFTW_FORWARD", (effort,), threads)
        else:
            # c2r transforms overwrite their input; the spectral tail is re-zeroed before each use
            self._plan = _plan(self.spec, self.grid, "FFTW_BACKWARD", (effort, "FFTW_DESTROY_INPUT"), threads)
        # planning with MEASURE scribbles on the arrays: start from clean buffers
        self.grid[...] = 0.0
        self.spec[...] = 0.0
        #: ``execute()`` runs the planned transform, unnormalised, in place on the owned buffers: the plan's
        #: own method (a solver calls it a dozen times a step: no Python frame of ours around it)
        self.execute = self._plan.execute

    def clear_tail(self, K: int) -> None:
        """Zero the coefficients k >= K of every row (needed before a backward execute)."""
        self.spec[:, K:] = 0.0


class FourierBasis:
    """Fourier basis with K modes on a dealiased grid of M points.

    Parameters
    ----------
    modes : int
        Number of stored complex modes K (wavenumbers 0 .. K-1), K >= 2.
    grid_size : int, optional
        Number of collocation points M; default :func:`dealiased_size` (K), the smallest even 5-smooth
        size >= 3K.
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
        M = dealiased_size(K) if grid_size is None else int(grid_size)
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
    def max_wavenumber(self) -> int:
        """The largest wavenumber K - 1 (the resolution parameter elsewhere is K, the number of modes)."""
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


#: n K above which :func:`point_coefficients` takes a non-uniform FFT: below it the recurrence's numpy calls
#: cost less than FINUFFT's fixed overhead (a plan, about half a millisecond)
POINT_NUFFT_SIZE = 1 << 16
#: FINUFFT's precision for :func:`point_coefficients` (its smallest reliable one in double precision)
POINT_NUFFT_EPS = 1e-14
#: FINUFFT's upsampling factor for :func:`point_coefficients`, fixed (not FINUFFT's choice, so that the
#: bits do not depend on its heuristics): at 1e-14 its kernel is 13 points wide at 3 and 15 at 2, which makes
#: 3 the faster at the sizes the continuation asks for
POINT_NUFFT_UPSAMPFAC = 3.0


def point_coefficients(theta: np.ndarray, w: np.ndarray, K: int) -> np.ndarray:
    """c_k = sum_i w_i exp(-i k theta_i), k = 0 .. K-1: the coefficients (this module's convention) of the
    measure sum_i w_i delta_{theta_i}, the adjoint of :func:`series`.

    For n K <= :data:`POINT_NUFFT_SIZE` by the recurrence exp(-i k theta) = exp(-i theta)^k (rounding grows
    like K eps); above it by a type-1 non-uniform FFT (FINUFFT, precision :data:`POINT_NUFFT_EPS` relative
    to sum |w_i|, one thread, no sorting: the same bits on every call; O(n + K log K) against O(n K)).
    Both agree with the direct sums to ~1e-14 (tested)."""
    theta = np.asarray(theta, dtype=float).ravel()
    w = np.asarray(w, dtype=float).ravel()
    if w.shape != theta.shape:
        raise ValueError(f"theta and w must have the same length, got {theta.size} and {w.size}")
    K = int(K)
    out = np.zeros(max(K, 0), dtype=complex)
    if K <= 0 or theta.size == 0:
        return out
    if theta.size * K <= POINT_NUFFT_SIZE:
        z = np.exp(-1j * theta)
        p = w.astype(complex)
        for k in range(K):
            out[k] = p.sum()
            p *= z
        return out
    import finufft
    f = finufft.nufft1d1(theta, w.astype(complex), 2 * K - 1, eps=POINT_NUFFT_EPS, isign=-1, nthreads=1,
                         upsampfac=POINT_NUFFT_UPSAMPFAC, modeord=0, spread_sort=0)
    out[:] = f[K - 1:]
    return out


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


def _floats(c: np.ndarray) -> np.ndarray:
    """1-D complex coefficients as a float view (re, im interleaved; a copy only if c is not already
    contiguous complex)."""
    if np.ndim(c) != 1:
        raise ValueError(f"expected a 1-D array of coefficients, got shape {np.shape(c)}")
    return np.ascontiguousarray(c, dtype=complex).view(float)


def _sumsq(v: np.ndarray) -> float:
    """sum v_i^2 of a float array: a BLAS dot, one pass and no temporary (the step control takes
    several per step; single-threaded below 10^4 entries, and under the solvers' one-thread loops)."""
    return float(np.dot(v, v))


def _energy(v: np.ndarray) -> float:
    """|c_0|^2 + 2 sum_{k >= 1} |c_k|^2 from the float view v of c, as 2 (all) - |c_0|^2 (no cancellation:
    the result is at least half the first term)."""
    return 2.0 * _sumsq(v) - (v[0] * v[0] + v[1] * v[1])


def spectral_tail(c: np.ndarray, fraction: float = 1.0 / 3.0, norm: float | None = None) -> float:
    """Relative L^2 size of the top ``fraction`` of the spectrum of 1-D coefficients c:
    sqrt(E_tail / E_total).

    ``norm``: :func:`l2_norm` of c when the caller has it, so that E_total = norm^2 is not
    summed again."""
    v = _floats(c)
    cut = max(int(math.floor((1.0 - fraction) * (v.size // 2))), 0)
    total = _energy(v) if norm is None else norm * norm
    upper = _energy(v) if cut == 0 else 2.0 * _sumsq(v[2 * cut:])
    return float(math.sqrt(upper / total)) if total > 0 else 0.0


def l2_norm(c: np.ndarray) -> float:
    """||f||_{L^2(sigma)} from 1-D coefficients c (Parseval)."""
    return float(math.sqrt(_energy(_floats(c))))


def resize(c: np.ndarray, K: int) -> np.ndarray:
    """The same function with K modes (zero-padding is exact; truncation drops modes >= K)."""
    out = np.zeros(np.shape(c)[:-1] + (K,), dtype=complex)
    n = min(K, np.shape(c)[-1])
    out[..., :n] = np.asarray(c)[..., :n]
    return out


def inverse_cdf(c: np.ndarray, u: np.ndarray, *, tol: float = 4e-16, max_iter: int = 100) -> np.ndarray:
    """Angles theta in [0, 2 pi] with F(theta) = u, F the CDF of the density with coefficients c.

    F(theta) = ∫_0^theta f dtheta' / (2 pi) = theta c_0 / (2 pi) + sum_{k>=1} Re[c_k (e^{ik theta} - 1) / (i pi k)]
    for f = c_0 + 2 Re sum c_k e^{ik theta} with c_0 = 1 (a probability density; ``c`` is normalised by
    c_0 here). Solved by safeguarded Newton iterations (bisection whenever Newton leaves the bracket)
    from a bracket tabulated on a grid of max(4K, 256) + 1 angles, to |F(theta) - u| <= tol, in O(n K)
    work per iteration. The density must be >= 0 (F monotone); ValueError otherwise.
    """
    c = np.asarray(c, dtype=complex)
    if not c[0].real > 0:
        raise ValueError("inverse_cdf: the series has no positive mass")
    c = c / c[0].real
    K = c.size
    k = np.arange(1, K)
    ck = c[1:]
    a_F = ck / (1j * np.pi * k)
    a_rho = ck / np.pi

    def F_and_dF(theta):
        Fv = theta / (2.0 * np.pi)
        dF = np.full_like(theta, 1.0 / (2.0 * np.pi))
        if K > 1:
            # sum_k a_k (e^{ik theta} - 1) = series(a, theta, k0=1) - sum a
            Fv = Fv + (series(a_F, theta, k0=1) - a_F.sum()).real
            dF = dF + series(a_rho, theta, k0=1).real
        return Fv, dF

    u = np.asarray(u, dtype=float)
    grid = np.linspace(0.0, 2.0 * np.pi, max(4 * K, 256) + 1)
    Fg, _ = F_and_dF(grid)
    Fg[0], Fg[-1] = 0.0, 1.0
    if np.any(np.diff(Fg) < 0):
        raise ValueError("inverse_cdf: the CDF is not monotone (the density is negative somewhere)")
    j = np.clip(np.searchsorted(Fg, u, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[j].copy(), grid[j + 1].copy()
    theta = lo + (hi - lo) * (u - Fg[j]) / np.maximum(Fg[j + 1] - Fg[j], 1e-300)
    for _ in range(max_iter):
        Fv, dF = F_and_dF(theta)
        r = Fv - u
        if np.max(np.abs(r), initial=0.0) <= tol:
            break
        lo = np.where(r < 0, theta, lo)
        hi = np.where(r > 0, theta, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = theta - r / dF
        bad = ~((new > lo) & (new < hi))
        theta = np.where(bad, 0.5 * (lo + hi), new)
    return theta
