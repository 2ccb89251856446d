"""Interaction sums of the attention kernel over a weighted point set on S^{d-1}.

For sources y_j with weights w_j (any real numbers; the particle solver uses w_j > 0, sum 1) and
evaluation points x (unit vectors), the two fields every velocity is built from (The model §1,
``Model.velocity``) are

    Psi(x) = sum_j w_j exp(beta(<x, y_j> - 1)),
    G(x)   = sum_j w_j exp(beta(<x, y_j> - 1)) P_x y_j,      P_x y = y - <x, y> x.

Both are dimensionless (the kernel is <= 1; G is a tangent vector at x). Three ways to compute them:

``direct``  (any d) — the sums as written, in blocks of evaluation points so that at most
    ``block_bytes`` of kernel values exist at once (never an N x N array for large N). O(N M d).

``fast`` on S^1 (d = 2) — the Bessel (Jacobi–Anger) expansion of the kernel,
    exp(beta(cos t - 1)) = sum_k ive(k, beta) e^{ikt},
  so with c_k = sum_j w_j conj(z_j)^k (z = x_1 + i x_2, a unit complex number)
    Psi(x) = sum_{|k|<=K} lambda_k c_k z^k,
    G(x)   = G_theta(x) e_theta(x),  G_theta = dPsi/dtheta / beta = sum_k i k g_k c_k z^k,
  with lambda_k = ive(k, beta), g_k = lambda_k / beta (g_1 = 1/2, g_k = 0 for k >= 2 at beta = 0:
  the exact limits, never a division by beta = 0). Powers z^k come from products of unit complex
  numbers (no trigonometric calls); both passes are BLAS products on blocks. O((N + M) K).

``nufft`` on S^1 (d = 2) — the same series through non-uniform FFTs (FINUFFT): a type-1 transform
  gives c_k for |k| <= K, and one type-2 transform (the adjoint of the same plan) gives
    Psi(x) + i G_theta(x) = sum_{|k|<=K} (lambda_|k| - k g_|k|) c_k z^k
  (both fields are real, so one complex transform carries the two). O((N + M) w + K log K), w = 13 the
  spreading width at the precision eps = max(tol, NUFFT_EPS_MIN) (relative to sum_j |w_j| and to the
  coefficients' l1 norm). There is one plan per chunk of NUFFT_CHUNK points, made on first need (once
  per run of a fixed point count); each evaluation sets a chunk's points once: the type-2 pass at the
  sources reuses them, and the angles, the weights' complex copy and the assembly of G are made per chunk
  in the threads (10^6 points, two threads: 84 -> 69 ms, measured); the points are not sorted (the
  fine grid stays in cache). The upsampling factor is 3 (CIRCLE_NUFFT_UPSAMPFAC: a kernel 13 points wide
  where it is 15 at 2; measured there). Reproducibility: every plan runs on one thread with that fixed factor. FINUFFT
  would otherwise choose the factor by itself, and its multithreaded type-1 spreading adds
  sub-grids in a run-dependent order (measured: 10^6 points, two threads, eight runs of the same
  transform differ by up to 6e-11 absolute, ~1e-16 relative: enough to break a bit-for-bit resume).
  Parallelism comes instead from chunks of NUFFT_CHUNK points transformed concurrently and added in
  chunk order: the same bits for any number of threads.

``fast`` on S^2 (d = 3) — the addition theorem for the orthonormal real harmonics,
    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{m>=0} eps_m Re[Pbar_lm(x) e^{im phi_x} Pbar_lm(y) e^{-im phi_y}],
  eps_0 = 1, eps_m = 2, lambda_l = sqrt(pi/(2 beta)) ive(l + 1/2, beta) (Funk–Hecke, The model §2), Pbar the
  fully normalised associated Legendre functions (∫ Pbar_lm^2 sin(theta) dtheta = 1/(2 pi)) from their
  standard three-term recurrence, vectorised over points and orders. G is obtained without derivatives
  of harmonics as G = P_x H with H(x) = sum_j w_j exp(beta(<x,y_j> - 1)) y_j: four kernel sums (weights
  w and w y^(a)) share one set of harmonic values. O((N + M) L^2 / 2), L ~ 9 sqrt(beta).

``nufft`` on S^2 (d = 3) — the same addition theorem through a 2-D NUFFT on the doubled sphere
  (theta, phi) in [0, 2 pi)^2: with sin theta signed, Pbar_lm(cos theta) = sum_{|p|<=l} a^{lm}_p e^{ip theta}
  exactly (:mod:`spectral.legendre_fourier`), so one type-1 transform F(k, m) of the weighted points
  gives c_lm = sum_p a^{lm}_p F(-p, m); G = grad Phi (Phi = Psi / beta, multipliers g_l) needs the series
  of d/dtheta Pbar_lm (a factor ip) and of Pbar_lm / sin theta (bounded at the poles), and two type-2
  transforms evaluate Psi + i G_theta and G_phi (real fields share a complex transform). The degree
  L (:func:`sphere_bandwidth`) also resolves (l + 1) g_l. O((N + M) w^2 + L^2 log L + L^3), w = 15;
  no array of size (points x modes). Same reproducibility design as on S^1 (one-thread plans, a fixed
  upsampling factor, here 2: SPHERE_NUFFT_UPSAMPFAC; fixed chunks added in chunk order).

The degree K (L) is the smallest for which every dropped multiplier (and, on S^1, k g_k) is below
``tol`` (1e-17) times lambda_0. Since max Psi >= mean Psi = lambda_0 ∫ d(w-measure), the truncation
error is ~tol relative to max Psi; round-off is ~1e-15 relative to max Psi; G inherits the same
absolute error. "Relative" accuracy below means relative to max_x Psi(x) (the scale of both fields:
|G| <= Psi pointwise); the tests also check it relative to max |G|.

:class:`InteractionSums` picks the method (``method="auto"``) from d, beta and the sizes by a cost
model measured on the development machine (the constants below).
"""
from __future__ import annotations

import math
import os
import threading

import finufft
import numpy as np

from spectral.legendre_fourier import legendre_fourier, point_sum_inputs, point_sums
from spectral.multipliers import kernel_bandwidth, potential_multipliers, zonal_multipliers
from . import validators as check
from ._blas import blas_threads
from ._chunks import chunk_slices, map_chunks, shared_pool

__all__ = ["InteractionSums", "direct_fields", "CircleSums", "CircleNufftSums", "SphereSums",
           "SphereNufftSums", "sphere_bandwidth", "sphere_nufft_chunk",
           "interaction_fields", "circle_bandwidth", "SUM_METHODS", "DEFAULT_BLOCK_BYTES", "NUFFT_EPS_MIN"]

SUM_METHODS = ("auto", "direct", "fast", "nufft")

#: kernel values held at once by the direct sums (bytes)
DEFAULT_BLOCK_BYTES = 32 * 2 ** 20
#: multipliers below this fraction of lambda_0 are dropped by the fast sums
DEFAULT_TOL = 1e-17
#: the smallest precision asked of FINUFFT (its own floor is about 1e-15 in double precision; measured
#: errors at 1e-14: <= 4e-14 relative to max Psi for N <= 1e6)
NUFFT_EPS_MIN = 1e-14
#: FINUFFT's upsampling factor sigma (fine grid / modes) of the S^1 NUFFT sums, fixed here and not left to
#: FINUFFT. Its fine grid has at most a few thousand points and stays in cache: the transforms' time is the
#: spreading, whose kernel at eps 1e-14 is 15 points wide at sigma = 2 (padded to 16) and 13 at sigma = 3
#: (padded to 14), the largest factor FINUFFT 2.5 accepts without a warning. Velocity of 10^6 points (two
#: threads, alternating fresh processes, best of 5, three pairs; 2026-11-27): 86-94 ms at 3.0 against
#: 98-117 ms at 2.0 at beta = 25, 88-91 against 104-113 ms at beta = 5, 81-95 against 90-106 ms at beta =
#: 100. Errors against the direct sums: 1.5e-14-3.1e-14 relative to max Psi (beta = 0.5 .. 100), against
#: 4e-15-2.2e-14 at 2.0 (scripts/PERFORMANCE.md, seventeenth session)
CIRCLE_NUFFT_UPSAMPFAC = 3.0
#: the same for the S^2 NUFFT sums. Its 2-D fine grid's FFTs grow as sigma^2, and the angles and the
#: coefficient conversions weigh as much as the spreading: 2.5 and 3.0 measured 5-17% faster at beta = 4 (N =
#: 10^5, 10^6) and slower at beta = 9 (N = 10^4) and 30 (N = 10^5), so it stays 2
SPHERE_NUFFT_UPSAMPFAC = 2.0
#: points per FINUFFT transform: the chunks, and so the order of the sums, depend on the point count only
NUFFT_CHUNK = 2 ** 17
#: the S^1 cost model takes the NUFFT's chunks as transformed this many at a time (the 2-core machines it was
#: measured on), whatever the thread count: the method auto picks, and so the bits of the sums, never depend
#: on the threads (a run resumed with other threads continues bit for bit). With one thread, above ~2e5
#: points at 3 < beta < 10, it picks the NUFFT where the fast sums are faster (~1.3-1.5x at factor 2)
NUFFT_COST_THREADS = 2
#: the fast S^2 sums are offered up to this degree (beyond, about beta > 400, direct sums are cheaper
#: for every N one can afford, and the Legendre recurrence gets long)
SPHERE_MAX_DEGREE = 200
#: up to this degree the S^2 NUFFT sums fold all orders at once from zero-padded tables (SphereNufftSums._fold)
FOLD_TABLE_MAX_DEGREE = 127
#: fewest points whose two S^2 type-2 transforms run on two threads (SphereNufftSums._paired)
PAIR_MIN_POINTS = 2048

# Cost model of ``method="auto"`` (seconds, with one OpenBLAS thread): direct ~ pairs * (d + 6) * _C_DIRECT;
# fast S^1 ~ points * ((K + 1) * _C_CIRCLE + _C_CIRCLE_POINT) per pass + _C_CIRCLE_CALL; fast S^2 ~ points *
# (number of (l, m) pairs) * _C_SPHERE per pass + _C_CALL * L (the Legendre recurrence is a Python loop
# over degrees); nufft S^1 ~ points / p * _C_NUFFT per pass + _C_NUFFT_CALL, p = the threads that transform
# its chunks of NUFFT_CHUNK points at once (min(NUFFT_COST_THREADS, chunks)); nufft S^2 ~ (sources + 2 evaluation
# points) * _C_S2NUFFT (one 2-D type-1 and two type-2 transforms at eps 1e-14, one thread) + (2L + 1)^3 *
# _C_S2NUFFT_FOLD (the conversions between double Fourier and harmonic coefficients, and the fine grid's
# FFTs) + _C_S2NUFFT_CALL. Only the ratios matter: the model compares methods, and each time constants were
# measured they were scaled to the unit of _C_DIRECT.
# S^2 NUFFT, measured 2026-11-27 after its conversions went from loops over orders to batched products
# (scripts/cost_model.py --d 3, same machine and settings as S^1 below, beta = 1 .. 100, N = 100 .. 3000):
# fixed cost (N = 100) 0.74-0.77 ms at L = 14 and 23, 1.3-1.6 ms at L = 31, 2.2 ms at L = 47, 14 ms at L =
# 90, i.e. ~0.7 ms + 2.3e-9 (2L + 1)^3; 2.0e-7-2.8e-7 s per point and transform (N = 1000 -> 3000); the
# direct S^2 sums measured 1.0-1.5 x _C_DIRECT, so the constants are these times. Before (2026-11-23, with
# the loops): fixed 1.25e-4 + 2.16e-7 (2L + 1)^2 and 1.67e-7 per point, times x 2.4 to the unit of the
# direct sums then; with the conversions faster, they picked the direct sums at beta = 9, N = 500 (2.35 ms
# against 1.28 ms by the NUFFT). Measured again with these constants (N = 100 .. 10^4): the pick within 10%
# of the fastest in all 35 cases, the worst 1.08x.
# S^1, measured 2026-11-27 (evening) by scripts/cost_model.py --fit (AMD EPYC family 25 model 1,
# OMP_NUM_THREADS=1, best of 7; beta = 1 .. 100, N = 30 .. 10^5, the sums at their sources) with the NUFFT at
# upsampling factor 3 (CIRCLE_NUFFT_UPSAMPFAC), fitted by relative least squares: direct 1.32e-9 s per pair and
# (d + 6); fast 7.44e-5 + (1.63e-9 (K + 1) + 5.92e-9) per point and pass; nufft 1.42e-4 + 6.15e-8 per point
# and pass. The constants below are those / 1.32 (_C_DIRECT's unit). The same morning's fit at factor 2: direct
# 1.36e-9, fast 7.9e-5 + (1.60e-9 (K + 1) + 5.7e-9), nufft 1.66e-4 + 7.63e-8: the factor took 19% off a NUFFT
# point; the fast and direct sums' constants moved by up to 6% between the two runs (this machine's noise).
# The constants before those (fast 2.0e-9 (K + 1) per point + 3e-5, nufft 4.5e-8 per point + 4e-5, measured
# at N = 1e6) priced a NUFFT point as 22 modes of a fast sum's point where it costs ~44, and the NUFFT's fixed
# cost at a third of the fit's: at beta = 5 and 10 (K = 26, 33) they picked the NUFFT from ~600 points on,
# which was 1.2x-1.9x slower than the fast sums up to 10^5 points (one thread). The fit puts the fast sums
# ahead of the NUFFT at any N for K < 33 (beta < ~10, one thread) and the direct sums ahead of both below
# ~100 points. The pick was within 10% of the fastest in 54 of 56 cases with the morning's constants on the
# morning's times, and in 51 of 56 (worst 1.20x) and 51 of 56 (worst 1.46x, beta = 10, N = 10^4: a NUFFT
# 1.46x faster than the fast sums in that run and 1.13x in the other) with these on the two runs of the
# evening, and 52 of 56 in a third run made with them (worst 1.41x: beta = 25, N = 3000, where the NUFFT
# is slow in every run); times vary by 10-40% between runs on this machine, and the morning's constants
# score the same on the evening's runs (52, 50 and 51 of 56). With two threads the NUFFT of 3e5 and 1e6
# points is the faster at beta = 5 and 10 (at factor 2: 31 and 92 ms against 40 and 134 ms at beta = 5; at
# 3, 88-91 ms at 1e6): hence p, with two threads taken whatever the count (NUFFT_COST_THREADS).
_C_DIRECT = 1.0e-9
_C_CIRCLE = 1.23e-9
_C_CIRCLE_POINT = 4.5e-9
_C_CIRCLE_CALL = 5.6e-5
_C_SPHERE = 1.2e-8
_C_CALL = 3.0e-5
_C_NUFFT = 4.66e-8
_C_NUFFT_CALL = 1.08e-4
_C_S2NUFFT = 2.5e-7
_C_S2NUFFT_FOLD = 2.3e-9
_C_S2NUFFT_CALL = 7.0e-4


class _ChunkPlans:
    """FINUFFT plans for the fixed chunks of a point set, one plan per chunk (the S^1 and S^2 NUFFT sums).

    ``map(fn, n)`` returns [fn(plan_j, slice_j)] for the chunks of ``chunk`` points of n points, in chunk
    order, computed ``threads`` at a time (:func:`solvers._chunks.map_chunks`); ``sum(fn, n)`` adds them in
    chunk order (the only order: the same bits for any ``threads``). A chunk has its own plan
    so that the points set on it for the type-1 pass stay set: the type-2 pass at the same points (the
    self-interaction, what the particle solver asks) reuses the type-1 pass's points instead of setting
    them again (one setpts per chunk and evaluation: 0.75 ms per 2^17 points on S^1 with FINUFFT's
    sorting, 0.15 ms without; measured). Plans are made on first need, so once per run of a fixed point
    count (``make()`` builds one). Each plan is single-threaded, so the chunks and the order of ``sum``
    fix the bits whatever ``threads``. An evaluation (a type-1 pass and the type-2 pass that relies on
    its points) holds ``lock``: two threads sharing one sums object take turns.
    """

    def __init__(self, make, chunk: int, threads: int, name: str) -> None:
        self._make, self.chunk, self.threads, self._name = make, int(chunk), int(threads), name
        self._plans: list = []
        self.lock = threading.Lock()

    def map(self, fn, n: int) -> list:
        need = len(chunk_slices(n, self.chunk))
        while len(self._plans) < need:
            self._plans.append(self._make())
        plans = self._plans
        return map_chunks(lambda j, c: fn(plans[j], c), n, self.chunk, self.threads, self._name)

    def sum(self, fn, n: int) -> np.ndarray:
        """The sum of fn(plan_j, slice_j) over the chunks (:meth:`map`), added in chunk order: the same bits
        for any number of threads."""
        parts = self.map(fn, n)
        total = parts[0]
        for p in parts[1:]:
            total += p
        return total


def _as_points(name: str, a, d: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or (d is not None and a.shape[1] != d):
        want = f"(n, {d})" if d is not None else "(n, d)"
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    return a


def _as_weights(w, n: int) -> np.ndarray:
    """The weights of n sources as a flat float array (ValueError unless there is one per source)."""
    w = np.asarray(w, dtype=float).reshape(-1)
    if w.shape != (n,):
        raise ValueError(f"w must have one weight per source ({n}), got shape {w.shape}")
    return w


def _tangent(x: np.ndarray, H: np.ndarray) -> np.ndarray:
    return H - np.einsum("nd,nd->n", x, H)[:, None] * x


# ----------------------------------------------------------------------------------------------
# direct sums
# ----------------------------------------------------------------------------------------------
def direct_fields(x: np.ndarray, y: np.ndarray, w: np.ndarray, beta: float, *,
                  block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """Psi and G at x (M, d) of the sources y (N, d) with weights w (N,), by direct summation.

    Evaluation points are taken in blocks of ``max(1, block_bytes // (8 N))`` rows, so at most
    ``block_bytes`` of kernel values exist at once. Cost O(M N d).

    Returns
    -------
    psi : (M,) ndarray
    G : (M, d) ndarray, tangent at x
    """
    x = _as_points("x", x)
    y = _as_points("y", y, x.shape[1])
    w = _as_weights(w, y.shape[0])
    M, N = x.shape[0], y.shape[0]
    psi = np.empty(M)
    H = np.empty_like(x)
    rows = max(1, int(block_bytes) // (8 * max(N, 1)))
    for s in range(0, M, rows):
        e = min(s + rows, M)
        T = x[s:e] @ y.T
        # in place: one block-sized array at a time
        T -= 1.0
        T *= beta
        np.exp(T, out=T)
        T *= w
        psi[s:e] = T.sum(axis=1)
        np.matmul(T, y, out=H[s:e])
    return psi, _tangent(x, H)


# ----------------------------------------------------------------------------------------------
# S^1
# ----------------------------------------------------------------------------------------------
def _tangent_circle(gth: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """G = G_theta e_theta(x), e_theta = (-x_2, x_1): the angular component as a tangent vector (into
    ``out``, of x's shape, when given)."""
    G = np.empty_like(x) if out is None else out
    g0 = G[:, 0]
    # the sign applied in place (the same bits as gth * -x_2, without a temporary column: 2x faster)
    np.multiply(gth, x[:, 1], out=g0)
    np.negative(g0, out=g0)
    np.multiply(gth, x[:, 0], out=G[:, 1])
    return G


def circle_bandwidth(beta: float, tol: float = DEFAULT_TOL) -> int:
    """Smallest K >= 1 with lambda_k <= tol lambda_0 and k g_k <= tol lambda_0 for all k > K (d = 2).

    lambda_k = ive(k, beta) are the kernel's Fourier multipliers and k g_k = k lambda_k / beta those of
    the angular component of G; both decrease (eventually) like exp(-k^2 / (2 beta)).
    """
    if beta == 0.0:
        return 1
    K = kernel_bandwidth(beta, 2, tol)
    while True:
        n = 2 * K + 16
        lam = zonal_multipliers(beta, 2, n)
        kg = np.arange(n + 1) * potential_multipliers(beta, 2, n)
        big = np.nonzero((lam > tol * lam[0]) | (kg > tol * lam[0]))[0]
        last = int(big[-1]) if big.size else 1
        if last < n - 4:
            return max(last, 1)
        K = n


def _powers(zc: np.ndarray, K: int, out: np.ndarray) -> np.ndarray:
    """out[k] = zc^k, k = 0..K, by doubling (log2 K broadcast products; |zc| = 1 keeps it stable)."""
    out[0] = 1.0
    if K >= 1:
        out[1] = zc
    p = 1
    while p < K:
        q = min(p, K - p)
        np.multiply(out[1:1 + q], out[p], out=out[p + 1:p + 1 + q])
        p += q
    return out


class CircleSums:
    """Fast interaction sums on S^1 through the kernel's Fourier (Bessel) series.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Multipliers below tol * lambda_0 are dropped (sets K, see :func:`circle_bandwidth`).
    block : int
        Points per block (the power table of a block is (K+1) x block complex numbers). Tables are
        recomputed in the second pass: measured cheaper than keeping them (memory traffic).
    """

    d = 2

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, block: int = 4096) -> None:
        self.beta = float(beta)
        self.K = circle_bandwidth(self.beta, tol)
        K = self.K
        self.lam = zonal_multipliers(self.beta, 2, K)
        self.g = potential_multipliers(self.beta, 2, K)
        self.block = int(block)
        # the power table, made on first use: (K + 1) x block complex numbers, 5.4 GiB at beta = 1e8 (K = 88480),
        # where InteractionSums makes this object for its cost model only (it picks the NUFFT)
        self._tables = None

    @property
    def table_bytes(self) -> float:
        """Bytes of the power table and the output block (made on the first :meth:`fields`)."""
        return 16.0 * (self.K + 3) * self.block

    @property
    def _buf(self) -> np.ndarray:
        if self._tables is None:
            self._tables = (np.empty((self.K + 1, self.block), dtype=complex), np.empty((2, self.block), dtype=complex))
        return self._tables[0]

    @property
    def _out(self) -> np.ndarray:
        self._buf
        return self._tables[1]

    def cost(self, n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call."""
        return (_C_CIRCLE * (self.K + 1) + _C_CIRCLE_POINT) * (n_src + n_eval) + _C_CIRCLE_CALL

    def _blocks(self, x: np.ndarray):
        zc = x[:, 0] - 1j * x[:, 1]
        for s in range(0, x.shape[0], self.block):
            e = min(s + self.block, x.shape[0])
            yield s, e, _powers(zc[s:e], self.K, self._buf[:, : e - s])

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 2) at x (default: at the sources y)."""
        y = _as_points("y", y, 2)
        w = _as_weights(w, y.shape[0])
        same = x is None
        x = y if same else _as_points("x", x, 2)
        K = self.K
        c = np.zeros(K + 1, dtype=complex)
        for s, e, P in self._blocks(y):
            c += P @ w[s:e]
        # at the sources, in one block: the table of powers just made is the evaluation's (the particle
        # solver's and the continuation's case; 633 points at K = 26: 184 -> 128 us, the same bits)
        tables = ((0, x.shape[0], P),) if same and 0 < x.shape[0] <= self.block else self._blocks(x)
        k = np.arange(K + 1)
        a = self.lam * c
        a[1:] *= 2.0
        b = (2j * k * self.g) * c
        # Re(A z^k) = Re(conj(A) conj(z)^k): the tables hold powers of conj(z)
        A = np.conj(np.stack([a, b]))
        out = np.empty((2, x.shape[0]))
        for s, e, P in tables:
            np.matmul(A, P, out=self._out[:, : e - s])
            out[:, s:e] = self._out[:, : e - s].real
        psi, gth = out
        return psi, _tangent_circle(gth, x)


class CircleNufftSums:
    """Interaction sums on S^1 through non-uniform FFTs (FINUFFT): the series of :class:`CircleSums`,
    with its coefficients and its evaluation by a type-1 transform and its adjoint.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Multipliers below tol * lambda_0 are dropped (sets K, :func:`circle_bandwidth`); the transforms'
        precision is max(tol, NUFFT_EPS_MIN).
    threads : int
        Threads that transform chunks of NUFFT_CHUNK points concurrently (one single-threaded plan each).
        The chunks and the order in which their coefficients are added are fixed by the point count
        alone, so the result is the same bits for any ``threads``.
    """

    d = 2

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, threads: int = 1) -> None:
        self.beta = float(beta)
        self.K = K = circle_bandwidth(self.beta, tol)
        self.eps = max(float(tol), NUFFT_EPS_MIN)
        self.threads = check.integer("threads", threads, ge=1)
        k = np.arange(-K, K + 1)
        lam = zonal_multipliers(self.beta, 2, K)[np.abs(k)]
        g = potential_multipliers(self.beta, 2, K)[np.abs(k)]
        self._mult = lam - k * g          # Psi + i G_theta = sum_k (lambda_|k| - k g_|k|) c_k e^{ik theta}
        # spread_sort=0, a fixed choice (FINUFFT's heuristic sorts a 1-D type 1): the fine grid, 3(2K + 1)
        # complex values (9 KiB at beta = 100), stays in cache whatever the order of the points, so sorting
        # them into bins buys nothing and took 0.6 of setpts' 0.75 ms per chunk of 2^17 points. Measured
        # (velocity of 10^6 points, two threads, paired medians of 25): 0.92x at beta = 25, 0.88x at 100
        self._plans = _ChunkPlans(lambda: finufft.Plan(1, (2 * K + 1,), n_trans=1, eps=self.eps, isign=-1,
                                                       dtype="complex128", nthreads=1,
                                                       upsampfac=CIRCLE_NUFFT_UPSAMPFAC, modeord=0,
                                                       spread_sort=0),
                                  NUFFT_CHUNK, self.threads, "attnpde-nufft")

    @staticmethod
    def cost(n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call, its chunks of NUFFT_CHUNK points taken
        NUFFT_COST_THREADS at a time whatever the threads given (see there)."""
        def per_pass(n: int) -> float:
            # the rounds of NUFFT_COST_THREADS chunks, each as long as a whole chunk (the last chunk of a
            # round may be short, the round waits for the longest)
            chunks = math.ceil(n / NUFFT_CHUNK)
            rounds = math.ceil(chunks / NUFFT_COST_THREADS)
            return _C_NUFFT * min(n, rounds * NUFFT_CHUNK)
        return per_pass(n_src) + per_pass(n_eval) + _C_NUFFT_CALL

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 2) at x (default: at the sources y)."""
        y = _as_points("y", y, 2)
        w = _as_weights(w, y.shape[0])
        x = None if x is None else _as_points("x", x, 2)
        with self._plans.lock:
            return self._fields(y, w, x)

    def _fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        theta = np.empty(y.shape[0])

        # per chunk, in the threads: the angles, then sum_j w_j e^{-ik theta_j} (the plan keeps the points)
        def source(plan, c: slice) -> np.ndarray:
            np.arctan2(y[c, 1], y[c, 0], out=theta[c])
            plan.setpts(theta[c])
            return plan.execute(w[c].astype(complex))
        coef = self._plans.sum(source, y.shape[0])
        coef *= self._mult
        same = x is None
        x = y if same else x
        psi, G = np.empty(x.shape[0]), np.empty_like(x)

        # per chunk: sum_k c_k e^{+ik theta} at the points (those of the type-1 pass at the sources), then
        # Psi and G from its real and imaginary parts
        def evaluate(plan, c: slice) -> None:
            if not same:
                plan.setpts(np.arctan2(x[c, 1], x[c, 0]))
            f = plan.execute_adjoint(coef)
            psi[c] = f.real
            _tangent_circle(f.imag, x[c], out=G[c])
        self._plans.map(evaluate, x.shape[0])
        return psi, G


# ----------------------------------------------------------------------------------------------
# S^2
# ----------------------------------------------------------------------------------------------
class SphereSums:
    """Fast interaction sums on S^2 through the addition theorem of spherical harmonics.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Degrees with lambda_l <= tol * lambda_0 are dropped (sets L).
    block : int or None
        Points per block; default so that a block's harmonic table is about 8 MiB. Tables are
        recomputed in the second pass (measured cheaper than keeping them).
    """

    d = 3

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, block: int | None = None) -> None:
        self.beta = float(beta)
        L = 0 if self.beta == 0.0 else kernel_bandwidth(self.beta, 3, tol)
        if L > SPHERE_MAX_DEGREE:
            raise ValueError(f"fast sums on S^2 need degree L = {L} at beta = {self.beta:g}, above the "
                             f"supported {SPHERE_MAX_DEGREE}; use method='direct'")
        self.L = L
        lam = zonal_multipliers(self.beta, 3, L)
        self.nlm = (L + 1) * (L + 2) // 2
        ls = np.concatenate([np.full(l + 1, l) for l in range(L + 1)])
        ms = np.concatenate([np.arange(l + 1) for l in range(L + 1)])
        self.D = 4.0 * np.pi * lam[ls] * np.where(ms > 0, 2.0, 1.0)
        self._a = [None] * (L + 1)
        self._b = [None] * (L + 1)
        for l in range(2, L + 1):
            m = np.arange(l - 1, dtype=float)
            self._a[l] = np.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))[:, None]
            self._b[l] = np.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1.0))[:, None]
        self.block = int(block) if block else max(256, (8 * 2 ** 20) // (16 * self.nlm))
        self._Y = np.empty((self.nlm, self.block), dtype=complex)
        self._P = np.empty((self.nlm, self.block))
        self._E = np.empty((L + 1, self.block), dtype=complex)

    def cost(self, n_src: int, n_eval: int) -> float:
        return _C_SPHERE * self.nlm * (n_src + n_eval) + _C_CALL * (self.L + 1)

    def basis(self, x: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
        """Y[lm, i] = Pbar_lm(cos theta_i) e^{-i m phi_i} for l <= L, m = 0..l (index l(l+1)/2 + m)."""
        n = x.shape[0]
        if n > self.block:
            raise ValueError("basis: more points than the block size")
        L = self.L
        P, E = self._P[:, :n], self._E[:, :n]
        Y = self._Y[:, :n] if Y is None else Y
        z = x[:, 2]
        s = np.hypot(x[:, 0], x[:, 1])
        safe = s > 0
        e = np.ones(n, dtype=complex)
        e[safe] = (x[safe, 0] - 1j * x[safe, 1]) / s[safe]     # e^{-i phi}; any phase at the poles
        P[0] = 1.0 / math.sqrt(4.0 * math.pi)
        for l in range(1, L + 1):
            o, o1, o2 = l * (l + 1) // 2, (l - 1) * l // 2, (l - 2) * (l - 1) // 2
            if l >= 2:
                t = z * P[o1:o1 + l - 1]
                t -= self._b[l] * P[o2:o2 + l - 1]
                t *= self._a[l]
                P[o:o + l - 1] = t
            np.multiply(z, P[o1 + l - 1], out=P[o + l - 1])
            P[o + l - 1] *= math.sqrt(2.0 * l + 1.0)
            np.multiply(s, P[o1 + l - 1], out=P[o + l])
            P[o + l] *= math.sqrt((2.0 * l + 1.0) / (2.0 * l))
        _powers(e, L, E)
        for l in range(L + 1):
            o = l * (l + 1) // 2
            np.multiply(P[o:o + l + 1], E[: l + 1], out=Y[o:o + l + 1])
        return Y

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 3) at x (default: at the sources y)."""
        y = _as_points("y", y, 3)
        w = _as_weights(w, y.shape[0])
        x = y if x is None else _as_points("x", x, 3)
        W = np.empty((y.shape[0], 4))
        W[:, 0] = w
        np.multiply(w[:, None], y, out=W[:, 1:])
        C = np.zeros((self.nlm, 4), dtype=complex)
        B = self.block
        for s in range(0, y.shape[0], B):
            e = min(s + B, y.shape[0])
            C += self.basis(y[s:e]) @ W[s:e]
        A = self.D[:, None] * np.conj(C)
        out = np.empty((x.shape[0], 4))
        for s in range(0, x.shape[0], B):
            e = min(s + B, x.shape[0])
            out[s:e] = (self.basis(x[s:e]).T @ A).real
        return out[:, 0], _tangent(x, out[:, 1:])


def sphere_bandwidth(beta: float, tol: float = DEFAULT_TOL) -> int:
    """Smallest L >= 1 with lambda_l <= tol lambda_0 and (l + 1) g_l <= tol lambda_0 for all l > L (d = 3).

    lambda_l are the kernel's Funk–Hecke multipliers and g_l = lambda_l / beta those of Phi = Psi / beta,
    whose gradient is G; a degree-l harmonic's gradient is sqrt(l (l + 1)) < l + 1 times as large, so
    (l + 1) g_l bounds what dropping degree l costs G. Both decrease like exp(-l^2 / (2 beta)).
    """
    if beta == 0.0:
        return 1
    L = kernel_bandwidth(beta, 3, tol)
    while True:
        n = 2 * L + 16
        lam = zonal_multipliers(beta, 3, n)
        lg = np.arange(1, n + 2) * potential_multipliers(beta, 3, n)
        big = np.nonzero((lam > tol * lam[0]) | (lg > tol * lam[0]))[0]
        last = int(big[-1]) if big.size else 1
        if last < n - 4:
            return max(last, 1)
        L = n


class SphereNufftSums:
    """Interaction sums on S^2 through a 2-D non-uniform FFT on the doubled sphere (FINUFFT).

    A point (theta, phi) of S^2 (theta in [0, pi] the colatitude) is a point of the torus [0, 2 pi)^2, and
    with sin theta signed every Pbar_lm(cos theta) is a trigonometric polynomial of degree l in theta
    (:mod:`spectral.legendre_fourier`: Pbar_lm = sum_p a^{lm}_p e^{ip theta}, exact). So, with the
    complex orthonormal harmonics Y_lm = Pbar_l|m| e^{im phi} and the addition theorem
    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{|m|<=l} Y_lm(x) conj(Y_lm(y)):

    1. one type-1 transform F(k, m) = sum_j w_j e^{-i(k theta_j + m phi_j)}, |k|, |m| <= L, gives
       c_lm = sum_j w_j conj(Y_lm(y_j)) = sum_p a^{l|m|}_p F(-p, m);
    2. Psi = sum 4 pi lambda_l c_lm Y_lm, and Phi = Psi / beta (multipliers g_l = lambda_l / beta, exact
       at beta = 0) has G = grad Phi = e_theta d_theta Phi + e_phi (1 / sin theta) d_phi Phi; folding back
       with the coefficients of Pbar_lm, of its theta-derivative (a factor i p) and of Pbar_lm / sin theta
       (bounded at the poles, also a trigonometric polynomial) gives the double Fourier coefficients of
       the three real fields Psi, G_theta, G_phi;
    3. two type-2 transforms (the adjoint of the same plan) evaluate Psi + i G_theta and G_phi at x
       (a real field on the torus has Hermitian coefficients, so two real fields share one transform).

    Cost O(N_src + 2 N_eval) spreading with width w = 15 in 2-D (w^2 per point; FINUFFT's width at eps
    1e-14 and upsampling 2) plus O(L^2 log L) for the fine-grid FFTs and O(L^3) for the conversions;
    no array of (points x modes). At the poles phi is undefined: phi = 0 there, with e_theta, e_phi
    taken at the same phi (Pbar_lm vanishes at the poles for m != 0, so the phase of
    Psi does not matter; G is the limit along that meridian). Reproducibility as
    :class:`CircleNufftSums`: single-threaded plans with a fixed upsampling factor
    (SPHERE_NUFFT_UPSAMPFAC = 2), fixed chunks of
    :func:`sphere_nufft_chunk` points (angles, transforms and the assembly of G per chunk) run
    concurrently and added in chunk order, so the same bits for any ``threads``.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Degrees with lambda_l and (l + 1) g_l below tol * lambda_0 are dropped (:func:`sphere_bandwidth`);
        the transforms' precision is max(tol, NUFFT_EPS_MIN).
    threads : int
        Threads transforming chunks concurrently; with one chunk and two threads or more, its two type-2
        transforms run on two threads (:meth:`_paired`). The result does not depend on it.
    """

    d = 3

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, threads: int = 1) -> None:
        self.beta = float(beta)
        self.L = L = _sphere_nufft_degree(self.beta, tol)
        self.eps = max(float(tol), NUFFT_EPS_MIN)
        self.threads = check.integer("threads", threads, ge=1)
        lam = zonal_multipliers(self.beta, 3, L)
        g = potential_multipliers(self.beta, 3, L)
        self._alpha = legendre_fourier(L)                      # Pbar_lm
        self._alpha_s = legendre_fourier(L, over_sin=True)     # Pbar_lm / sin theta
        self._lam = [4.0 * np.pi * lam[m:] for m in range(L + 1)]
        self._g = [4.0 * np.pi * g[m:] for m in range(L + 1)]
        self._p = np.arange(-L, L + 1)
        # the fold's tables with all orders at once (_fold): row l - m of order m, zero-padded to L + 1 rows
        # (2 (L + 1)^3 floats: 0.5 MB at L = 31, 34 MB at L = 127); above FOLD_TABLE_MAX_DEGREE the loop
        # over orders (_fold_by_order) keeps the memory at the lists' (L + 1)^3
        self._tables = None
        if L <= FOLD_TABLE_MAX_DEGREE:
            rows = np.arange(L + 1)
            A = np.zeros((L + 1, L + 1, L + 1))
            A_s = np.zeros_like(A)
            for m in range(L + 1):
                A[m, : L + 1 - m] = self._alpha[m]
                A_s[m, : L + 1 - m] = self._alpha_s[m]
            inside = rows[:, None] + rows[None, :] <= L                  # [m, r]: degree m + r <= L
            deg = np.minimum(rows[:, None] + rows[None, :], L)
            self._tables = (A, A_s, np.where(inside, 4.0 * np.pi * lam[deg], 0.0),
                            np.where(inside, 4.0 * np.pi * g[deg], 0.0), rows % 2 == 0)
        self.chunk = sphere_nufft_chunk(L)
        self._pair_plan = self._angles_0 = None          # see _paired
        self._make_plan = lambda: finufft.Plan(1, (2 * L + 1, 2 * L + 1), n_trans=1, eps=self.eps, isign=-1,
                                               dtype="complex128", nthreads=1,
                                               upsampfac=SPHERE_NUFFT_UPSAMPFAC, modeord=0)
        self._plans = _ChunkPlans(self._make_plan, self.chunk, self.threads, "attnpde-s2nufft")

    def cost(self, n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call (one thread)."""
        return _sphere_nufft_cost(self.L, n_src, n_eval)

    # -- points --------------------------------------------------------------------------------------
    @staticmethod
    def _angles(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """theta in [0, pi], phi of unit vectors x (n, 3); phi = 0 where sin theta = 0 (as in :meth:`_frame`;
        arctan2(0, -0.0) would give pi)."""
        s = np.hypot(x[:, 0], x[:, 1])
        theta = np.arctan2(s, x[:, 2])
        phi = np.arctan2(x[:, 1], x[:, 0])
        phi[s == 0.0] = 0.0
        return theta, phi

    @staticmethod
    def _frame(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """sin theta, cos phi, sin phi of unit vectors x (n, 3), phi = 0 where sin theta = 0."""
        s = np.hypot(x[:, 0], x[:, 1])
        pole = s == 0.0
        cph, sph = np.ones_like(s), np.zeros_like(s)
        np.divide(x[:, 0], s, out=cph, where=~pole)
        np.divide(x[:, 1], s, out=sph, where=~pole)
        return s, cph, sph

    # -- transforms ----------------------------------------------------------------------------------
    def _type1(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """F(k, m) = sum_j w_j e^{-i(k theta_j + m phi_j)}; each chunk's plan keeps its points (for a
        type-2 pass at the sources), and with one chunk its angles are kept for :meth:`_type2`'s pair."""
        def one(plan, c: slice) -> np.ndarray:
            angles = self._angles(y[c])
            plan.setpts(*angles)
            if c.start == 0:
                self._angles_0 = angles
            return plan.execute(w[c].astype(complex))
        return self._plans.sum(one, y.shape[0])

    def _paired(self, n: int) -> bool:
        """Whether the two type-2 transforms of a pass over n points run on two threads: with two threads
        or more, a single chunk (more chunks keep the threads busy already) and at least PAIR_MIN_POINTS
        points. The second transform gets its own plan, set to the same points (its setpts overlaps the
        first transform). Measured (evaluations at the sources, best of 7 x 10, two threads against one):
        0.89-0.96x from 2000 to 8192 points at beta = 4 and 9, but 0.97-1.18x at 300 and 1000 points, where
        the hand-over costs what it saves. The same bits: each transform is the same single-threaded
        FINUFFT call at the same points."""
        return self.threads >= 2 and PAIR_MIN_POINTS <= n <= self.chunk

    def _second(self, B2: np.ndarray, angles: tuple) -> np.ndarray:
        """The G_phi transform on the pair's second plan, at ``angles``."""
        self._pair_plan.setpts(*angles)
        return self._pair_plan.execute_adjoint(B2)

    def _type2(self, x: np.ndarray, B1: np.ndarray, B2: np.ndarray, same: bool) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 3) at x from the coefficients of Psi + i G_theta (B1) and G_phi (B2); ``same``:
        x are the sources of the type-1 pass just made (their chunks' plans hold their angles)."""
        psi = np.empty(x.shape[0])
        G = np.empty_like(x)
        paired = self._paired(x.shape[0])
        if paired and self._pair_plan is None:
            self._pair_plan = self._make_plan()          # planned here, not beside another plan's transform

        def one(plan, c: slice) -> None:
            angles = None
            if not same:
                angles = self._angles(x[c])
                plan.setpts(*angles)
            if paired:
                second = shared_pool(1, "attnpde-s2nufft-pair").submit(
                    self._second, B2, self._angles_0 if same else angles)
            s, cph, sph = self._frame(x[c])
            f1 = plan.execute_adjoint(B1)
            gph = (second.result() if paired else plan.execute_adjoint(B2)).real
            psi[c] = f1.real
            gth = f1.imag
            # G = G_theta e_theta + G_phi e_phi, e_theta = (cos th cos ph, cos th sin ph, -sin th),
            # e_phi = (-sin ph, cos ph, 0)
            zt = x[c, 2] * gth
            Gc = G[c]
            np.multiply(zt, cph, out=Gc[:, 0])
            Gc[:, 0] -= gph * sph
            np.multiply(zt, sph, out=Gc[:, 1])
            Gc[:, 1] += gph * cph
            np.multiply(s, gth, out=Gc[:, 2])
            np.negative(Gc[:, 2], out=Gc[:, 2])
        self._plans.map(one, x.shape[0])
        return psi, G

    # -- coefficients --------------------------------------------------------------------------------
    def coefficients(self, F: np.ndarray) -> list[np.ndarray]:
        """c_lm = sum_i w_i Pbar_lm(cos theta_i) e^{-i m phi_i} for m = 0..L (``legendre_fourier.point_sums``):
        entry m is (L + 1 - m,), degrees l = m..L."""
        return point_sums(F, self._alpha)

    def _coefficient_table(self, F: np.ndarray) -> np.ndarray:
        """:meth:`coefficients` as one array X (L + 1, L + 1), X[m, l - m] = c_lm and zeros for l > L, from
        the zero-padded tables (one batched product for all orders)."""
        U = point_sum_inputs(F, self.L)
        R = np.matmul(self._tables[0], np.stack([U.real, U.imag], axis=2))          # (m, r, 2)
        return R[..., 0] + 1j * R[..., 1]

    def _fold(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Double Fourier coefficients (p, m), |p|, |m| <= L, of Psi + i G_theta and of G_phi from the
        coefficients X of :meth:`_coefficient_table`: every order at once from the zero-padded tables (a
        few numpy calls in place of ~10 per order: at L = 31 the loop took 1.6 ms of an 8.5 ms evaluation
        of 8192 points). Up to FOLD_TABLE_MAX_DEGREE; above, :meth:`_fold_by_order`. The two agree to
        rounding (the sums over l run in another order)."""
        L = self.L
        A, A_s, lam, g, even = self._tables
        phi = g * X                                       # coefficients of Phi = Psi / beta
        # sum_l alpha[m][l - m, p] y[m, l - m] for every m: one batched real product per table (rows: the
        # real and imaginary parts of lam c and of Phi's coefficients; of Phi's for A_s)
        y = np.stack([lam * X, phi], axis=1)              # (m, 2, r) complex
        v = np.matmul(np.concatenate([y.real, y.imag], axis=1), A)                  # (m, 4, p)
        w = np.matmul(np.stack([phi.real, phi.imag], axis=1), A_s)                  # (m, 2, p)
        psi_s, th_s, ph_s = v[:, 0] + 1j * v[:, 2], v[:, 1] + 1j * v[:, 3], w[:, 0] + 1j * w[:, 1]
        ip = (1j * self._p)[:, None]
        # columns m >= 0 (index L + m) of each real field; Psi and G_theta: cosine series for m even, sine
        # for m odd; G_phi (Pbar_lm / sin theta, times i m): the other way round, zero at m = 0
        Bpsi, Bth, B2 = (np.empty((2 * L + 1, 2 * L + 1), dtype=complex) for _ in range(3))
        Bpsi[:, L:] = _series_to_exp_all(psi_s, even).T
        Bth[:, L:] = ip * _series_to_exp_all(th_s, even).T
        B2[:, L:] = _series_to_exp_all(ph_s, ~even).T * (1j * np.arange(L + 1))
        for B in (Bpsi, Bth, B2):                         # real fields: B(p, -m) = conj(B(-p, m))
            B[:, L - 1::-1] = np.conj(B[::-1, L + 1:])
        Bpsi += 1j * Bth
        return Bpsi, B2

    def _fold_by_order(self, c: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_fold`, one order m at a time (no tables of all orders)."""
        L = self.L
        Bpsi = np.zeros((2 * L + 1, 2 * L + 1), dtype=complex)
        Bth, B2 = np.zeros_like(Bpsi), np.zeros_like(Bpsi)
        ip = 1j * self._p
        for m in range(L + 1):
            cosine = m % 2 == 0
            phi_m = self._g[m] * c[m]                     # coefficients of Phi = Psi / beta
            Bpsi[:, L + m] = _series_to_exp(self._alpha[m].T @ (self._lam[m] * c[m]), cosine)
            Bth[:, L + m] = ip * _series_to_exp(self._alpha[m].T @ phi_m, cosine)
            if m >= 1:                                    # (1 / sin theta) d/dphi: i m and Pbar_lm / sin theta
                B2[:, L + m] = (1j * m) * _series_to_exp(self._alpha_s[m].T @ phi_m, not cosine)
        for B in (Bpsi, Bth, B2):                         # real fields: B(p, -m) = conj(B(-p, m))
            B[:, L - 1::-1] = np.conj(B[::-1, L + 1:])
        Bpsi += 1j * Bth
        return Bpsi, B2

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 3) at x (default: at the sources y)."""
        y = _as_points("y", y, 3)
        w = _as_weights(w, y.shape[0])
        x = None if x is None else _as_points("x", x, 3)
        with self._plans.lock:
            F = self._type1(y, w)
            B1, B2 = self._fold(self._coefficient_table(F)) if self._tables is not None else \
                self._fold_by_order(self.coefficients(F))
            return self._type2(y if x is None else x, B1, B2, x is None)


def sphere_nufft_chunk(L: int) -> int:
    """Points per transform of the S^2 NUFFT sums: 2^15, or the power of two >= 2 (4L + 2)^2 if larger.

    Depends on L only, so the chunks (and the order of the sums) are fixed by the point count and beta.
    Smaller than NUFFT_CHUNK so that N ~ 1e5 points already spread on several threads; at least twice
    the fine grid (4L + 2)^2 so that each chunk's FFTs stay a small part of its spreading (measured,
    one thread: one type-1 + two type-2 transforms cost ~0.5 us per point; the whole fixed cost of an
    evaluation, three FFTs of the fine grid and the conversions, 1.8 ms at L = 48 and 7.6 ms at L = 90).
    """
    return max(2 ** 15, 1 << (2 * (4 * L + 2) ** 2 - 1).bit_length())


def _sphere_nufft_degree(beta: float, tol: float) -> int:
    """:func:`sphere_bandwidth`, refused above SPHERE_MAX_DEGREE (the coefficient tables grow as L^3)."""
    L = sphere_bandwidth(beta, tol)
    if L > SPHERE_MAX_DEGREE:
        raise ValueError(f"nufft sums on S^2 need degree L = {L} at beta = {beta:g}, above the "
                         f"supported {SPHERE_MAX_DEGREE}; use method='direct'")
    return L


def _sphere_nufft_cost(L: int, n_src: int, n_eval: int) -> float:
    """Estimated seconds of one :meth:`SphereNufftSums.fields` (one thread): one type-1 transform at the
    sources, two type-2 at the evaluation points, the conversions (O(L^3)) and the fine-grid FFTs."""
    return _C_S2NUFFT * (n_src + 2 * n_eval) + _C_S2NUFFT_FOLD * (2 * L + 1) ** 3 + _C_S2NUFFT_CALL


def _series_to_exp_all(a: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    """Exponential coefficients b_p, p = -L..L, of each row of a (n, L + 1): sum_{p=0}^{L} a_p cos(p t) where
    ``cosine[i]``, else sum a_p sin(p t); (n, 2L + 1). cos(pt) = (e^{ipt} + e^{-ipt}) / 2, sin(pt) =
    (e^{ipt} - e^{-ipt}) / (2i)."""
    L = a.shape[1] - 1
    cos = cosine[:, None]
    b = np.empty((a.shape[0], 2 * L + 1), dtype=complex)
    pos = np.where(cos, 0.5 * a[:, 1:], -0.5j * a[:, 1:])
    b[:, L + 1:] = pos
    b[:, :L] = np.where(cos, pos[:, ::-1], -pos[:, ::-1])
    b[:, L] = np.where(cosine, a[:, 0], 0.0)
    return b


def _series_to_exp(a: np.ndarray, cosine: bool) -> np.ndarray:
    """Exponential coefficients b_p, p = -L..L, of sum_{p=0}^{L} a_p cos(p t) (or sin(p t)): one row of
    :func:`_series_to_exp_all`."""
    return _series_to_exp_all(a[None, :], np.array([cosine]))[0]


# ----------------------------------------------------------------------------------------------
# selection
# ----------------------------------------------------------------------------------------------
class InteractionSums:
    """Psi and G of a weighted point set, by the method that suits d, beta and the sizes.

    Parameters
    ----------
    d : int
        Ambient dimension (points on S^{d-1}).
    beta : float
        Inverse temperature >= 0.
    method : {"auto", "direct", "fast", "nufft"}
        "fast" exists for d = 2 (Fourier) and d = 3 (harmonics, beta up to about 400); "nufft" for
        d = 2 and d = 3 (FINUFFT; on S^2 the same beta range); "auto" takes the cheapest that exists by
        a measured cost model.
    tol : float
        Truncation of the fast sums (relative to lambda_0), and the NUFFT precision (at least
        NUFFT_EPS_MIN).
    block_bytes : int
        Memory bound of one block of the direct sums.
    blas_threads : int or None
        OpenBLAS threads while summing (default 1: the block products are small, and extra threads
        stall on a busy machine; see ``solvers._blas``); None leaves the library's setting alone.
    nufft_threads : int or None
        Threads of the NUFFT sums (:class:`CircleNufftSums`, :class:`SphereNufftSums`; the result
        does not depend on it).
        None: the environment's OMP_NUM_THREADS, else 1.
    """

    def __init__(self, d: int, beta: float, method: str = "auto", *, tol: float = DEFAULT_TOL,
                 block_bytes: int = DEFAULT_BLOCK_BYTES, blas_threads: int | None = 1,
                 nufft_threads: int | None = None) -> None:
        if method not in SUM_METHODS:
            raise ValueError(f"sum method must be one of {SUM_METHODS}, got {method!r}")
        check.integer("d", d, ge=2)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
        if not (isinstance(block_bytes, (int, np.integer)) and block_bytes >= 8):
            raise ValueError(f"block_bytes must be an integer >= 8, got {block_bytes!r}")
        self.d, self.beta, self.method = int(d), float(beta), method
        self.tol, self.block_bytes = tol, int(block_bytes)
        self.blas_threads = blas_threads
        self._fast = None
        self._fast_error = None
        if self.d in (2, 3):
            try:
                self._fast = (CircleSums if self.d == 2 else SphereSums)(self.beta, tol)
            except ValueError as err:          # S^2 at very large beta
                self._fast_error = str(err)
        if nufft_threads is None:
            env = os.environ.get("OMP_NUM_THREADS", "")
            nufft_threads = int(env) if env.isdigit() and int(env) >= 1 else 1
        self.nufft_threads = check.integer("nufft_threads", nufft_threads, ge=1)
        self._s2_degree = None           # the S^2 NUFFT's degree, for the cost model
        self._nufft = None               # made on first use (its FINUFFT plans): see :attr:`nufft`
        if method == "fast" and self._fast is None:
            why = self._fast_error or f"fast sums exist on S^1 and S^2 only (d = 2, 3), not d = {self.d}"
            raise ValueError(why)
        if method == "fast" and self.d == 2:
            from ._memory import refuse_if_too_big
            refuse_if_too_big({f"the fast sums' table of K = {self._fast.K} modes": self._fast.table_bytes},
                              "use sum='nufft' or 'auto'")
        if method == "nufft":
            if self.d not in (2, 3):
                raise ValueError(f"nufft sums exist on S^1 and S^2 only (d = 2, 3), not d = {self.d}: "
                                 f"use sum='direct' or 'auto'")
            if self.d == 3:              # the degree check, up front (the plans are made on first use)
                _sphere_nufft_degree(self.beta, tol)

    @property
    def fast(self):
        """The fast-sum object (CircleSums / SphereSums) or None."""
        return self._fast

    @property
    def nufft(self):
        """The NUFFT sums (:class:`CircleNufftSums` / :class:`SphereNufftSums`, made on first use) on S^1
        and S^2, else None."""
        if self._nufft is None and self.d == 2:
            self._nufft = CircleNufftSums(self.beta, self.tol, self.nufft_threads)
        elif self._nufft is None and self.d == 3:
            self._nufft = SphereNufftSums(self.beta, self.tol, self.nufft_threads)
        return self._nufft

    def direct_cost(self, n_src: int, n_eval: int) -> float:
        return _C_DIRECT * (self.d + 6) * n_src * n_eval

    def method_for(self, n_src: int, n_eval: int | None = None) -> str:
        """The method ``fields`` uses for these sizes: "direct", "fast" or "nufft"."""
        if self.method != "auto":
            return self.method
        n_eval = n_src if n_eval is None else n_eval
        costs = {"direct": self.direct_cost(n_src, n_eval)}
        if self._fast is not None:
            costs["fast"] = self._fast.cost(n_src, n_eval)
        if self.d == 2:
            costs["nufft"] = CircleNufftSums.cost(n_src, n_eval)
        elif self.d == 3 and self._fast is not None:
            # the S^2 NUFFT's degree is within a few of SphereSums' (same range of beta); the cost model
            # needs only L, so no plans are made to answer
            if self._s2_degree is None:
                self._s2_degree = sphere_bandwidth(self.beta, self.tol)
            costs["nufft"] = _sphere_nufft_cost(self._s2_degree, n_src, n_eval)
        return min(costs, key=costs.get)

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, d) at x, default at the sources y (self-interaction included)."""
        n_eval = y.shape[0] if x is None else x.shape[0]
        method = self.method_for(y.shape[0], n_eval)
        if method == "nufft":
            return self.nufft.fields(y, w, x)
        with blas_threads(self.blas_threads):
            if method == "fast":
                return self._fast.fields(y, w, x)
            return direct_fields(y if x is None else x, y, w, self.beta, block_bytes=self.block_bytes)

    def pair(self, y: np.ndarray, w: np.ndarray, psi: np.ndarray | None = None) -> float:
        """A = sum_ij w_i w_j g(<y_i, y_j>), g(t) = exp(beta(t-1))/beta (t - 1 at beta = 0): the pair
        term of the energy (``Model.energy``), from Psi at the sources (computed if not given)."""
        w = np.asarray(w, dtype=float)
        if self.beta == 0.0:
            m = w @ np.asarray(y, dtype=float)
            return float(m @ m - w.sum() ** 2)
        if psi is None:
            psi, _ = self.fields(y, w)
        return float(w @ psi) / self.beta


def interaction_fields(y: np.ndarray, w: np.ndarray, beta: float, x: np.ndarray | None = None,
                       method: str = "auto", **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """One-off Psi, G at x (default the sources) — see :class:`InteractionSums`."""
    y = _as_points("y", y)
    return InteractionSums(y.shape[1], beta, method, **kwargs).fields(y, w, x)
