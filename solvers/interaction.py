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

``nufft`` on S^1 (d = 2) — the same series through non-uniform FFTs (``ducc0.nufft``): a type-1
  transform gives c_k for |k| <= K, and one type-2 transform (on the same plan) gives
    Psi(x) + i G_theta(x) = sum_{|k|<=K} (lambda_|k| - k g_|k|) c_k z^k
  (both fields are real, so one complex transform carries the two). O((N + M) w + K log K), w = 13 the
  spreading width at the precision eps = max(tol, NUFFT_EPS_MIN) = 3e-13.

``nufft`` on S^2 (d = 3) — the addition theorem for the orthonormal harmonics (Funk–Hecke, The model §2),
    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{|m|<=l} Y_lm(x) conj(Y_lm(y)),
  lambda_l = sqrt(pi/(2 beta)) ive(l + 1/2, beta), through ducc0's spherical harmonic transforms at
  arbitrary points (``ducc0.sht``: an interpolation on the doubled sphere, O(points) plus O(L^3) per
  call): the adjoint synthesis of the weights gives a_lm = sum_j w_j conj(Y_lm(y_j)); a spin-0 synthesis
  of 4 pi lambda_l a_lm gives Psi, and a spin-1 synthesis of the gradient of Phi = Psi / beta (multipliers
  g_l = lambda_l / beta, exact at beta = 0) gives G = grad Phi. O(N + 2 M + L^3 per chunk).

Both NUFFTs are ducc0's, called on one thread each, on fixed chunks of points whose coefficients are added
in chunk order (:class:`CircleNufftSums`, :class:`SphereNufftSums`): the same bits for any number of
threads and on every call.

The degree K (L) is the smallest for which every dropped multiplier (and, on S^1, k g_k; on S^2,
(l + 1) g_l) is below ``tol`` (1e-17) times lambda_0. Since max Psi >= mean Psi = lambda_0 ∫ d(w-measure),
the truncation error is ~tol relative to max Psi; the transforms' error is <= ~6e-14 relative to max Psi
(<= ~2e-12 relative to max |G|, which is small for uniform points; measured up to N = 10^5 and beta = 100,
``scripts/studies/sums_accuracy.py``); G inherits the same absolute error.
"Relative" accuracy below means relative to max_x Psi(x) (the scale of both fields: |G| <= Psi
pointwise); the tests also check it relative to max |G|.

:class:`InteractionSums` picks the method (``method="auto"``) from d, beta and the sizes by a cost
model measured on the development machine (the constants below).
"""
from __future__ import annotations

import math
import os

import ducc0
import numpy as np

from spectral.multipliers import kernel_bandwidth, potential_multipliers, zonal_multipliers
from . import validators as check
from ._blas import blas_threads
from ._chunks import chunk_slices, map_chunks, shared_pool

__all__ = ["InteractionSums", "direct_fields", "CircleSums", "CircleNufftSums", "SphereNufftSums",
           "sphere_bandwidth", "sphere_nufft_chunk", "interaction_fields", "circle_bandwidth", "SUM_METHODS",
           "DEFAULT_BLOCK_BYTES", "NUFFT_EPS_MIN"]

SUM_METHODS = ("auto", "direct", "fast", "nufft")

#: kernel values held at once by the direct sums (bytes)
DEFAULT_BLOCK_BYTES = 32 * 2 ** 20
#: multipliers below this fraction of lambda_0 are dropped by the fast sums
DEFAULT_TOL = 1e-17
#: the smallest precision asked of ducc0's transforms (its floor in double precision is 2e-13). At 1e-12 the S^2
#: sums were within 1e-12 of the direct ones (relative to max |G|), but their errors are not symmetric about
#: the equator, and particles on it (whose exact field is tangent to it) left it by 2.6e-14 in 200 RK4 steps;
#: 3e-13 takes a kernel one point wider on S^2 (none on S^1) and keeps them within 3e-15
NUFFT_EPS_MIN = 3e-13
#: ducc0's oversampling factor of the S^1 NUFFT sums, and the S^2 one: each passed as a window of +-0.01 that
#: holds a single factor of ducc0's kernel table, where ducc0 then takes the narrowest kernel of that factor
#: meeting the precision. Left to itself ducc0 picks kernel and factor by a cost model of the thread count,
#: the point count and the SIMD width, so other thread counts or machines would get other bits. On S^1 the
#: fine grid stays in cache and the spreading is the cost: 2.5 (13 points wide at 3e-13) is the largest
#: factor; on S^2 the factor moved the time by < 10% between 1.6 and 2.5 (N = 10^2 .. 10^6, L = 15 .. 90)
CIRCLE_NUFFT_SIGMA = 2.5
SPHERE_NUFFT_SIGMA = 2.0
#: points per S^1 NUFFT transform: the chunks, and so the order of the sums, depend on the point count only
NUFFT_CHUNK = 2 ** 17
#: the S^1 cost model takes the NUFFT's chunks as transformed this many at a time (the 2-core machines it was
#: measured on), whatever the thread count: the method auto picks, and so the bits of the sums, never depend
#: on the threads (a run resumed with other threads continues bit for bit)
NUFFT_COST_THREADS = 2
#: the S^2 NUFFT sums are offered up to this degree (beta up to about 400; beyond it only the direct sums): ducc0
#: goes higher, but their accuracy and cost model are tested up to beta = 100 (L = 90) only
SPHERE_MAX_DEGREE = 200
#: fewest evaluation points whose two S^2 syntheses (Psi and G) run on two threads when they are one chunk
#: (below, the hand-over costs about what it saves)
PAIR_MIN_POINTS = 2048

# Cost model of ``method="auto"`` (seconds, with one OpenBLAS thread): direct ~ pairs * (d + 6) * _C_DIRECT;
# fast S^1 ~ points * ((K + 1) * _C_CIRCLE + _C_CIRCLE_POINT) per pass + _C_CIRCLE_CALL; nufft S^1 ~ points / p
# * _C_NUFFT per pass + _C_NUFFT_CALL, p = the threads that transform its chunks of NUFFT_CHUNK points at once
# (min(NUFFT_COST_THREADS, chunks)); nufft S^2 ~ (sources + 2 evaluation points) * _C_S2NUFFT + (ducc0 calls)
# * (_C_S2NUFFT_CALL + L^2 _C_S2NUFFT_DEGREE) / 3 (one adjoint per chunk of sources, two syntheses per chunk of
# evaluation points; one thread). Only the ratios matter: the model compares methods, and the constants are
# fitted by ``scripts/cost_model.py --fit`` (--d 2 and --d 3, one thread, beta = 1 .. 100, N = 30 .. 10^5, the
# sums at their sources) and scaled to the unit of _C_DIRECT (the direct sums' fit of the same run), the mean of
# two runs. A point of the S^1 NUFFT costs about as much as 20 Bessel modes of a fast-sum point, so the NUFFT is
# the pick from a few thousand points at beta >= 1; on S^2 the NUFFT is the pick from a few hundred points.
_C_DIRECT = 1.0e-9
_C_CIRCLE = 2.9e-9
_C_CIRCLE_POINT = 2.6e-8
_C_CIRCLE_CALL = 7.1e-5
_C_NUFFT = 6.5e-8
_C_NUFFT_CALL = 1.43e-4
_C_S2NUFFT = 2.1e-7
_C_S2NUFFT_CALL = 3.6e-4
_C_S2NUFFT_DEGREE = 5.5e-7


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
    """Interaction sums on S^1 through non-uniform FFTs (``ducc0.nufft``): the series of :class:`CircleSums`,
    with its coefficients and its evaluation by a type-1 transform and the type-2 transform of the same plan.

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

    Notes
    -----
    Reproducibility: every plan runs on one thread with a pinned oversampling factor
    (CIRCLE_NUFFT_SIGMA); parallelism comes from chunks of NUFFT_CHUNK points transformed concurrently
    and added in chunk order. A plan is made per chunk and evaluation (the points move between
    evaluations); at the sources the type-2 pass reuses the type-1 pass's plan, and points given as x
    get a plan made the same way, so that the sums at the sources and at the same points given are the
    same bits. Plans are not shared between calls, so threads may share one sums object.
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
        self._plan_args = dict(grid_shape=(2 * K + 1,), epsilon=self.eps, nthreads=1,
                               sigma_min=CIRCLE_NUFFT_SIGMA - 0.01, sigma_max=CIRCLE_NUFFT_SIGMA + 0.01)

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

    def _plan(self, theta: np.ndarray):
        """The single-threaded plan of one chunk's angles (made for type 1, used for both types)."""
        return ducc0.nufft.plan(nu2u=True, coord=theta[:, None], **self._plan_args)

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 2) at x (default: at the sources y)."""
        y = _as_points("y", y, 2)
        w = _as_weights(w, y.shape[0])
        same = x is None
        x = y if same else _as_points("x", x, 2)
        if y.shape[0] == 0 or x.shape[0] == 0:      # ducc0 refuses an empty point set; the sums are 0
            return np.zeros(x.shape[0]), np.zeros_like(x)
        K = self.K
        theta = np.empty(y.shape[0])
        plans: dict = {}

        # per chunk, in the threads: the angles, then sum_j w_j e^{-ik theta_j}
        def source(j: int, c: slice) -> np.ndarray:
            np.arctan2(y[c, 1], y[c, 0], out=theta[c])
            plans[j] = plan = self._plan(theta[c])
            return plan.nu2u(points=w[c].astype(complex), forward=True, out=np.empty(2 * K + 1, dtype=complex))
        parts = map_chunks(source, y.shape[0], NUFFT_CHUNK, self.threads, "attnpde-nufft")
        coef = parts[0]
        for p in parts[1:]:                       # in chunk order: the same bits for any thread count
            coef += p
        coef *= self._mult
        psi, G = np.empty(x.shape[0]), np.empty_like(x)

        # per chunk: sum_k c_k e^{+ik theta} at the points, then Psi and G from its real and imaginary parts
        def evaluate(j: int, c: slice) -> None:
            plan = plans[j] if same else self._plan(np.arctan2(x[c, 1], x[c, 0]))
            f = plan.u2nu(grid=coef, forward=False, out=np.empty(c.stop - c.start, dtype=complex))
            psi[c] = f.real
            _tangent_circle(f.imag, x[c], out=G[c])
        map_chunks(evaluate, x.shape[0], NUFFT_CHUNK, self.threads, "attnpde-nufft")
        return psi, G


# ----------------------------------------------------------------------------------------------
# S^2
# ----------------------------------------------------------------------------------------------
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


def sphere_nufft_chunk(L: int) -> int:
    """Points per ducc0 call of the S^2 NUFFT sums: 2^14, or the power of two >= 16 L^2 if larger.

    Depends on L only, so the chunks (and the order of the sums) are fixed by the point count and beta.
    Each call has a fixed cost of ~(0.07 + 1.3e-4 L^2) ms against ~0.1 us per point (the adjoint and both
    syntheses, measured), so a chunk of >= 16 L^2 points keeps it near a tenth of the chunk's time, while
    chunks of 2^14 share N ~ 10^5 points evenly between two threads.
    """
    return max(2 ** 14, 1 << (16 * L * L - 1).bit_length())


def _sphere_nufft_degree(beta: float, tol: float) -> int:
    """:func:`sphere_bandwidth`, refused above SPHERE_MAX_DEGREE."""
    L = sphere_bandwidth(beta, tol)
    if L > SPHERE_MAX_DEGREE:
        raise ValueError(f"nufft sums on S^2 need degree L = {L} at beta = {beta:g}, above the "
                         f"supported {SPHERE_MAX_DEGREE}; use method='direct'")
    return L


def _sphere_nufft_cost(L: int, n_src: int, n_eval: int) -> float:
    """Estimated seconds of one :meth:`SphereNufftSums.fields` (one thread): the adjoint synthesis at the
    sources, the two syntheses at the evaluation points, and each call's fixed cost (one per chunk)."""
    chunk = sphere_nufft_chunk(L)
    calls = math.ceil(max(n_src, 1) / chunk) + 2 * math.ceil(max(n_eval, 1) / chunk)
    return _C_S2NUFFT * (n_src + 2 * n_eval) + calls * (_C_S2NUFFT_CALL + _C_S2NUFFT_DEGREE * L * L) / 3.0


def _sin_theta(x: np.ndarray) -> np.ndarray:
    """sin theta = sqrt(x_1^2 + x_2^2) of unit vectors x (n, 3): 4x faster than numpy's hypot, which unit
    vectors do not need (0 exactly where x_1 = x_2 = 0, and where their squares underflow: both the angles
    and the frame then take phi = 0)."""
    s = x[:, 0] * x[:, 0]
    s += x[:, 1] * x[:, 1]
    return np.sqrt(s, out=s)


def _sphere_locations(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """(theta, phi) of unit vectors x (n, 3) into ``out`` (n, 2): theta in [0, pi], phi in [0, 2 pi] (ducc0's
    range), phi = 0 where sin theta = 0 (as in :func:`_sphere_tangent`; arctan2(0, -0.0) would give pi)."""
    s = _sin_theta(x)
    np.arctan2(s, x[:, 2], out=out[:, 0])
    phi = np.arctan2(x[:, 1], x[:, 0])
    np.add(phi, 2.0 * math.pi, out=phi, where=phi < 0.0)
    if not s.all():                               # a pole (masks cost more than the rest: only then)
        phi[s == 0.0] = 0.0
    out[:, 1] = phi
    return out


def _sphere_tangent(g: np.ndarray, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """G = G_theta e_theta + G_phi e_phi at unit vectors x (n, 3) from g = (G_theta, G_phi) (2, n), into
    ``out`` (n, 3); e_theta = (cos th cos ph, cos th sin ph, -sin th), e_phi = (-sin ph, cos ph, 0), with
    phi = 0 where sin theta = 0 (the frame of :func:`_sphere_locations`)."""
    gth, gph = g
    s = _sin_theta(x)
    pole = s == 0.0
    cph, sph = np.ones_like(s), np.zeros_like(s)
    np.divide(x[:, 0], s, out=cph, where=~pole)
    np.divide(x[:, 1], s, out=sph, where=~pole)
    zt = x[:, 2] * gth
    np.multiply(zt, cph, out=out[:, 0])
    out[:, 0] -= gph * sph
    np.multiply(zt, sph, out=out[:, 1])
    out[:, 1] += gph * cph
    np.multiply(s, gth, out=out[:, 2])
    np.negative(out[:, 2], out=out[:, 2])
    return out


class SphereNufftSums:
    """Interaction sums on S^2 through ducc0's spherical harmonic transforms at arbitrary points.

    With a_lm = sum_j w_j conj(Y_lm(y_j)) (Y_lm the orthonormal harmonics, ∫ |Y_lm|^2 dA = 1, ducc0's
    layout of m >= 0: a real field's coefficients) and the addition theorem
    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{|m|<=l} Y_lm(x) conj(Y_lm(y)):

    1. ``ducc0.sht.adjoint_synthesis_general`` of the weights at the sources gives a_lm (l <= L);
    2. ``synthesis_general`` of 4 pi lambda_l a_lm (spin 0) gives Psi at x;
    3. ``synthesis_general`` of 4 pi g_l a_lm with spin 1 in mode "DERIV1" (the spheroidal field of those
       coefficients times sqrt(l (l + 1)), i.e. the gradient) gives (d_theta Phi, d_phi Phi / sin theta) of
       Phi = Psi / beta, so G = grad Phi = G_theta e_theta + G_phi e_phi (g_l = lambda_l / beta with its
       exact beta -> 0 limit; the constant has no gradient, so g_0 is not used).

    ducc0 interpolates on the doubled sphere with a kernel of width 15 (2-D) at eps 3e-13: O(N + 2 M)
    plus O(L^3) per call; no array of (points x modes). At the poles phi is undefined: phi = 0 there, with
    e_theta, e_phi taken at the same phi (G is the limit along that meridian).

    Reproducibility: ducc0's multithreaded calls are not reproducible (its adjoint adds the points into its
    grid from several threads in a run-dependent order; its synthesis on two threads differed in bits from
    one), so every call is single-threaded, with the kernel pinned (SPHERE_NUFFT_SIGMA); the sources come
    in fixed chunks of :func:`sphere_nufft_chunk` points whose coefficients are added in chunk order, and
    the evaluation points in the same chunks (Psi and G of each chunk separate tasks). Chunks and tasks
    run ``threads`` at a time: the same bits for any ``threads`` and on every call.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Degrees with lambda_l and (l + 1) g_l below tol * lambda_0 are dropped (:func:`sphere_bandwidth`);
        the transforms' precision is max(tol, NUFFT_EPS_MIN).
    threads : int
        Threads working on chunks concurrently; with one chunk of at least PAIR_MIN_POINTS evaluation
        points and two threads or more, its Psi and G run on two threads. The result does not depend on it.
    """

    d = 3

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, threads: int = 1) -> None:
        self.beta = float(beta)
        self.L = L = _sphere_nufft_degree(self.beta, tol)
        self.eps = max(float(tol), NUFFT_EPS_MIN)
        self.threads = check.integer("threads", threads, ge=1)
        # ducc0's layout: order m, then degree l = m..L
        deg = np.concatenate([np.arange(m, L + 1) for m in range(L + 1)])
        self._lam = 4.0 * np.pi * zonal_multipliers(self.beta, 3, L)[deg]
        self._g = np.where(deg > 0, 4.0 * np.pi * potential_multipliers(self.beta, 3, L)[deg], 0.0)
        self.chunk = sphere_nufft_chunk(L)
        self._args = dict(lmax=L, epsilon=self.eps, nthreads=1, sigma_min=SPHERE_NUFFT_SIGMA - 0.01,
                          sigma_max=SPHERE_NUFFT_SIGMA + 0.01)

    def cost(self, n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call (one thread)."""
        return _sphere_nufft_cost(self.L, n_src, n_eval)

    def coefficients(self, y: np.ndarray, w: np.ndarray, loc: np.ndarray | None = None) -> np.ndarray:
        """a_lm = sum_j w_j conj(Y_lm(y_j)) in ducc0's layout (1, (L + 1)(L + 2) / 2), by chunks in chunk
        order; ``loc`` (N, 2), when given, receives the sources' (theta, phi)."""
        loc = np.empty((y.shape[0], 2)) if loc is None else loc

        def one(j: int, c: slice) -> np.ndarray:
            _sphere_locations(y[c], loc[c])
            return ducc0.sht.adjoint_synthesis_general(map=w[None, c], spin=0, loc=loc[c], **self._args)
        parts = map_chunks(one, y.shape[0], self.chunk, self.threads, "attnpde-s2nufft")
        a = parts[0]
        for p in parts[1:]:                       # in chunk order: the same bits for any thread count
            a += p
        return a

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 3) at x (default: at the sources y)."""
        y = _as_points("y", y, 3)
        w = _as_weights(w, y.shape[0])
        same = x is None
        x = y if same else _as_points("x", x, 3)
        if y.shape[0] == 0 or x.shape[0] == 0:      # ducc0 refuses an empty point set; the sums are 0
            return np.zeros(x.shape[0]), np.zeros_like(x)
        loc_y = np.empty((y.shape[0], 2))
        a = self.coefficients(y, w, loc_y)
        if same:
            loc = loc_y
        else:
            loc = np.empty((x.shape[0], 2))
            map_chunks(lambda j, c: _sphere_locations(x[c], loc[c]), x.shape[0], self.chunk, self.threads,
                       "attnpde-s2nufft")
        a_psi, a_grad = self._lam * a, self._g * a
        psi, G = np.empty(x.shape[0]), np.empty_like(x)
        cuts = chunk_slices(x.shape[0], self.chunk)

        def task(k: int) -> None:
            c = cuts[k // 2]
            if k % 2 == 0:
                psi[c] = ducc0.sht.synthesis_general(alm=a_psi, spin=0, loc=loc[c], **self._args)[0]
            else:
                g = ducc0.sht.synthesis_general(alm=a_grad, spin=1, loc=loc[c], mode="DERIV1", **self._args)
                _sphere_tangent(g, x[c], G[c])
        tasks = range(2 * len(cuts))
        if self.threads >= 2 and (len(cuts) > 1 or x.shape[0] >= PAIR_MIN_POINTS):
            list(shared_pool(self.threads, "attnpde-s2nufft").map(task, tasks))
        else:
            for k in tasks:
                task(k)
        return psi, G


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
        "fast" exists for d = 2 (Fourier power tables); "nufft" for d = 2 and d = 3 (ducc0; on S^2 up to
        degree SPHERE_MAX_DEGREE, beta up to about 400); "auto" takes the cheapest that exists by a
        measured cost model.
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
        self._fast = CircleSums(self.beta, tol) if self.d == 2 else None
        if nufft_threads is None:
            env = os.environ.get("OMP_NUM_THREADS", "")
            nufft_threads = int(env) if env.isdigit() and int(env) >= 1 else 1
        self.nufft_threads = check.integer("nufft_threads", nufft_threads, ge=1)
        # the S^2 NUFFT's degree, for the cost model (None: the S^2 NUFFT is not offered at this beta)
        self._s2_degree = None
        if self.d == 3:
            L = sphere_bandwidth(self.beta, tol)
            self._s2_degree = L if L <= SPHERE_MAX_DEGREE else None
        self._nufft = None               # made on first use: see :attr:`nufft`
        if method == "fast" and self._fast is None:
            other = "on S^2 use sum='nufft' or 'auto'" if self.d == 3 else "use sum='direct' or 'auto'"
            raise ValueError(f"fast sums exist on S^1 only (d = 2), not d = {self.d}: {other}")
        if method == "fast" and self.d == 2:
            from ._memory import refuse_if_too_big
            refuse_if_too_big({f"the fast sums' table of K = {self._fast.K} modes": self._fast.table_bytes},
                              "use sum='nufft' or 'auto'")
        if method == "nufft":
            if self.d not in (2, 3):
                raise ValueError(f"nufft sums exist on S^1 and S^2 only (d = 2, 3), not d = {self.d}: "
                                 f"use sum='direct' or 'auto'")
            if self.d == 3:              # the degree check, up front (the sums are made on first use)
                _sphere_nufft_degree(self.beta, tol)

    @property
    def fast(self):
        """The fast-sum object (CircleSums, on S^1) or None."""
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
        elif self.d == 3 and self._s2_degree is not None:
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
