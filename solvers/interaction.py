"""Interaction sums of the attention kernel over a weighted point set on S^{d-1}.

For sources y_j with weights w_j (any real numbers; the particle solver uses w_j > 0, sum 1) and
evaluation points x (unit vectors), the two fields every velocity is built from (The model §1,
``Model.velocity``) are

    Psi(x) = sum_j w_j exp(beta(<x, y_j> - 1)),
    G(x)   = sum_j w_j exp(beta(<x, y_j> - 1)) P_x y_j,      P_x y = y - <x, y> x.

Both are dimensionless (the kernel is <= 1; G is a tangent vector at x). The ways to compute them:

``direct``  (any d) — the sums as written, compiled (``solvers/_kernels.c``): per evaluation point the
    sources in order, the exponential by its own polynomial (the same bits on every CPU); no array of
    kernel values. O(N M d). :func:`direct_fields` is the same sums in numpy (blocks of at most
    ``block_bytes`` of kernel values), the reference the tests and benchmarks compare against.

``fast`` on S^1 (d = 2) — the Bessel (Jacobi–Anger) expansion of the kernel,
    exp(beta(cos t - 1)) = sum_k ive(k, beta) e^{ikt},
  so with c_k = sum_j w_j conj(z_j)^k (z = x_1 + i x_2, a unit complex number)
    Psi(x) = sum_{|k|<=K} lambda_k c_k z^k,
    G(x)   = G_theta(x) e_theta(x),  G_theta = dPsi/dtheta / beta = sum_k i k g_k c_k z^k,
  with lambda_k = ive(k, beta), g_k = lambda_k / beta (g_1 = 1/2, g_k = 0 for k >= 2 at beta = 0:
  the exact limits, never a division by beta = 0). Powers z^k come from products of unit complex
  numbers (no trigonometric calls), in compiled loops (:class:`CircleSums`). O((N + M) K).

``fast`` on S^2 (d = 3) — the addition theorem for the orthonormal harmonics (Funk–Hecke, The model §2),
    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{|m|<=l} Y_lm(x) conj(Y_lm(y)),
  lambda_l = sqrt(pi/(2 beta)) ive(l + 1/2, beta), with the harmonics as polynomials in x (Legendre
  recurrences in x_3 times powers of x_1 + i x_2: no angles), in compiled loops
  (:class:`~solvers.interaction_sphere.SphereSums`). O((N + M) L^2 / 2).

``nufft`` on S^1 (d = 2) — the Bessel series through non-uniform FFTs (``ducc0.nufft``): a type-1
  transform gives c_k for |k| <= K, and one type-2 transform (on the same plan) gives
    Psi(x) + i G_theta(x) = sum_{|k|<=K} (lambda_|k| - k g_|k|) c_k z^k
  (both fields are real, so one complex transform carries the two). O((N + M) w + K log K), w = 13 the
  spreading width at the precision eps = max(tol, NUFFT_EPS_MIN) = 3e-13.

``nufft`` on S^2 (d = 3) — the addition theorem through ducc0's spherical harmonic transforms at
  arbitrary points (``ducc0.sht``: an interpolation on the doubled sphere, O(points) plus O(L^3) per
  call): the adjoint synthesis of the weights gives a_lm = sum_j w_j conj(Y_lm(y_j)); a spin-0 synthesis
  of 4 pi lambda_l a_lm gives Psi, and a spin-1 synthesis of the gradient of Phi = Psi / beta (multipliers
  g_l = lambda_l / beta, exact at beta = 0) gives G = grad Phi
  (:class:`~solvers.interaction_sphere.SphereNufftSums`). O(N + 2 M + L^3 per chunk).

Reproducibility: every method gives the same bits for any number of threads, on every call, and (the
compiled ones) on every CPU: the compiled loops compute each evaluation point on its own and add the
coefficients of fixed chunks of sources in chunk order (``solvers/_sums.py``); both NUFFTs are ducc0's,
called on one thread each, on fixed chunks of points whose coefficients are added in chunk order.

The degree K (L) is the smallest for which every dropped multiplier (and, on S^1, k g_k; on S^2,
(l + 1) g_l) is below ``tol`` (1e-17) times lambda_0. Since max Psi >= mean Psi = lambda_0 ∫ d(w-measure),
the truncation error is ~tol relative to max Psi; the series are summed to round-off (a few 1e-15 relative
to max Psi, growing with the degree), the transforms to <= ~6e-14 relative to max Psi (<= ~2e-12 relative
to max |G|, which is small for uniform points; measured up to N = 10^5 and beta = 100,
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
from ._chunks import map_chunks
from ._compiled import kernels
from ._sums import (DEFAULT_TOL, NUFFT_COST_THREADS, NUFFT_EPS_MIN, SERIES_CHUNK, SeriesSums, as_points,
                    as_weights, chunk_rounds)
from .interaction_sphere import (PAIR_MIN_POINTS, SPHERE_MAX_DEGREE, SphereNufftSums, SphereSums,
                                 _sphere_nufft_cost, _sphere_nufft_degree, _sphere_series_cost, sphere_bandwidth,
                                 sphere_nufft_chunk)

__all__ = ["InteractionSums", "direct_fields", "CircleSums", "CircleNufftSums", "SphereSums", "SphereNufftSums",
           "sphere_bandwidth", "sphere_nufft_chunk", "interaction_fields", "circle_bandwidth", "SUM_METHODS",
           "DEFAULT_BLOCK_BYTES", "NUFFT_EPS_MIN", "DEFAULT_TOL", "SERIES_CHUNK", "NUFFT_CHUNK",
           "PAIR_MIN_POINTS", "SPHERE_MAX_DEGREE"]

SUM_METHODS = ("auto", "direct", "fast", "nufft")

#: kernel values held at once by the numpy direct sums (:func:`direct_fields`; bytes)
DEFAULT_BLOCK_BYTES = 32 * 2 ** 20
#: ducc0's oversampling factor of the S^1 NUFFT sums, passed as a window of +-0.01 that holds a single factor of
#: ducc0's kernel table (see interaction_sphere.SPHERE_NUFFT_SIGMA): the fine grid stays in cache and the
#: spreading is the cost, so 2.5 (13 points wide at 3e-13), the largest factor
CIRCLE_NUFFT_SIGMA = 2.5
#: points per S^1 NUFFT transform: the chunks, and so the order of the sums, depend on the point count only
NUFFT_CHUNK = 2 ** 17
#: evaluation points per call of the compiled direct sums (the calls run on threads; each point is computed on
#: its own, so the split changes no bit)
DIRECT_CHUNK = 1024

# Cost model of ``method="auto"`` (seconds): direct ~ pairs * (d + 6) * _C_DIRECT + _C_DIRECT_CALL;
# fast S^1 ~ points * ((K + 1) * _C_CIRCLE + _C_CIRCLE_POINT) per pass + _C_CIRCLE_CALL; fast S^2 ~ (L + 1)(L + 2)/2
# * (sources * _C_S2SERIES_SRC + evaluation points * _C_S2SERIES_EVAL) + _C_S2SERIES_CALL; nufft S^1 ~ points
# * _C_NUFFT per pass + _C_NUFFT_CALL; nufft S^2 ~ (sources + 2 evaluation points) * _C_S2NUFFT + (ducc0 calls)
# * (_C_S2NUFFT_CALL + L^2 _C_S2NUFFT_DEGREE) / 3 (one adjoint per chunk of sources, two syntheses per chunk of
# evaluation points; one thread). A pass over points split in chunks is charged for its chunks taken
# NUFFT_COST_THREADS at a time (each round as long as a whole chunk), whatever the thread count. Only the ratios
# matter: the model compares methods, and the constants are fitted by ``scripts/cost_model.py --fit`` (--d 2 and
# --d 3, one thread, CPU time, beta = 0.3 .. 100, N = 30 .. 10^5, the sums at their sources) and scaled to the unit
# of _C_DIRECT (the direct sums' fit of the same run; the two runs' direct sums agree within 5%). The compiled
# S^1 series beat the NUFFT on one thread up to K ~ 90 (beta ~ 100) at any N, and on two threads (its chunks of
# SERIES_CHUNK points run in parallel) beyond; on S^2 the series beat ducc0's transforms up to a few thousand
# points at beta <= 25, and the direct sums are the pick below a few dozen points (a few hundred at beta = 100).
_C_DIRECT = 1.0e-9
_C_DIRECT_CALL = 1.06e-5
_C_CIRCLE = 9.38e-10
_C_CIRCLE_POINT = 6.54e-9
_C_CIRCLE_CALL = 2.23e-5
_C_NUFFT = 9.01e-8
_C_NUFFT_CALL = 3.2e-4


def _tangent(x: np.ndarray, H: np.ndarray) -> np.ndarray:
    return H - np.einsum("nd,nd->n", x, H)[:, None] * x


# ----------------------------------------------------------------------------------------------
# direct sums
# ----------------------------------------------------------------------------------------------
def direct_fields(x: np.ndarray, y: np.ndarray, w: np.ndarray, beta: float, *,
                  block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """Psi and G at x (M, d) of the sources y (N, d) with weights w (N,), by direct summation in numpy (the
    reference of the other methods).

    Evaluation points are taken in blocks of ``max(1, block_bytes // (8 N))`` rows, so at most
    ``block_bytes`` of kernel values exist at once. Cost O(M N d).

    Returns
    -------
    psi : (M,) ndarray
    G : (M, d) ndarray, tangent at x
    """
    x = as_points("x", x)
    y = as_points("y", y, x.shape[1])
    w = as_weights(w, y.shape[0])
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


def compiled_direct_fields(x: np.ndarray, y: np.ndarray, w: np.ndarray, beta: float, threads: int = 1
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Psi and G at x (M, d) of the sources y (N, d), weights w, by the compiled direct sums: for each
    evaluation point the sources in order, t = <x, y_j> (components in order), e = exp((t - 1) beta) w_j,
    Psi += e, H += e y_j, then G = H - <x, H> x; O(1) memory beyond the output. Chunks of DIRECT_CHUNK
    evaluation points run ``threads`` at a time (the same bits for any count)."""
    x = as_points("x", x)
    y = as_points("y", y, x.shape[1])
    w = as_weights(w, y.shape[0])
    psi, G = np.empty(x.shape[0]), np.empty_like(x)
    if x.shape[0] <= DIRECT_CHUNK or threads <= 1:
        kernels.direct_sums(x, y, w, float(beta), psi, G)
    else:
        map_chunks(lambda j, s: kernels.direct_sums(x[s], y, w, float(beta), psi[s], G[s]), x.shape[0],
                   DIRECT_CHUNK, threads, "attnpde-direct")
    return psi, G


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


class CircleSums(SeriesSums):
    """Interaction sums on S^1 through the kernel's Fourier (Bessel) series, by compiled loops.

    With z = x_1 + i x_2 and its powers z^k = z^{k-1} z (k <= K, a product of unit complex numbers at each
    step: no trigonometric calls), c_k = sum_j w_j conj(z_j)^k, a_k = lambda_k c_k (doubled for k >= 1) and
    b_k = 2 i k g_k c_k:

        Psi(x) = Re sum_{k=0}^K a_k z^k,    G(x) = (Re sum_{k=0}^K b_k z^k) e_theta(x).

    About 10 floating-point operations per source and mode, 14 per evaluation point and mode, vectorised over
    points (``solvers/_kernels.c``); the coefficients of fixed chunks of SERIES_CHUNK sources are added in
    chunk order and each evaluation point is computed on its own: the same bits for any ``threads`` and SIMD
    width.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Multipliers below tol * lambda_0 are dropped (sets K, see :func:`circle_bandwidth`).
    threads : int
        Threads working on chunks of points (the result does not depend on it).
    """

    d = 2

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, threads: int = 1) -> None:
        self.beta = float(beta)
        self.K = K = circle_bandwidth(self.beta, tol)
        self.ncoef = K + 1
        self.threads = check.integer("threads", threads, ge=1)
        self.lam = zonal_multipliers(self.beta, 2, K)
        self.g = potential_multipliers(self.beta, 2, K)
        a = self.lam.copy()
        a[1:] *= 2.0
        # the multipliers of the compiled evaluation: a_k = mult[k, 0] c_k, b_k = i mult[k, 1] c_k
        self._mult = np.ascontiguousarray(np.stack([a, 2.0 * np.arange(K + 1) * self.g], axis=1))

    def cost(self, n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call."""
        points = (chunk_rounds(n_src, SERIES_CHUNK, NUFFT_COST_THREADS)
                  + chunk_rounds(n_eval, SERIES_CHUNK, NUFFT_COST_THREADS))
        return (_C_CIRCLE * (self.K + 1) + _C_CIRCLE_POINT) * points + _C_CIRCLE_CALL

    def _coefficients_into(self, y: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        """c_k = sum_j w_j conj(z_j)^k, k = 0 .. K, of the sources y (N, 2) with weights w."""
        kernels.circle_coefficients(y, w, out)

    def _evaluate_into(self, x: np.ndarray, c: np.ndarray, psi: np.ndarray, G: np.ndarray) -> None:
        kernels.circle_evaluate(x, c, self._mult, psi, G)


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
        y = as_points("y", y, 2)
        w = as_weights(w, y.shape[0])
        same = x is None
        x = y if same else as_points("x", x, 2)
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
        "fast" (compiled series) and "nufft" (ducc0) exist for d = 2 and d = 3 (on S^2 up to degree
        SPHERE_MAX_DEGREE, beta up to about 400); "direct" (compiled) for any d; "auto" takes the cheapest
        that exists by a measured cost model.
    tol : float
        Truncation of the series (relative to lambda_0), and the NUFFT precision (at least NUFFT_EPS_MIN).
    nufft_threads : int or None
        Threads of the compiled and the NUFFT sums, which work on fixed chunks of points (the result does not
        depend on it). None: the environment's OMP_NUM_THREADS, else 1.
    """

    def __init__(self, d: int, beta: float, method: str = "auto", *, tol: float = DEFAULT_TOL,
                 nufft_threads: int | None = None) -> None:
        if method not in SUM_METHODS:
            raise ValueError(f"sum method must be one of {SUM_METHODS}, got {method!r}")
        check.integer("d", d, ge=2)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
        self.d, self.beta, self.method = int(d), float(beta), method
        self.tol = tol
        if nufft_threads is None:
            env = os.environ.get("OMP_NUM_THREADS", "")
            nufft_threads = int(env) if env.isdigit() and int(env) >= 1 else 1
        self.nufft_threads = check.integer("nufft_threads", nufft_threads, ge=1)
        if method in ("fast", "nufft") and self.d not in (2, 3):
            raise ValueError(f"{method} sums exist on S^1 and S^2 only (d = 2, 3), not d = {self.d}: "
                             f"use sum='direct' or 'auto'")
        # the S^2 series' degree, for the cost model (None: the S^2 series are not offered at this beta)
        self._s2_degree = None
        if self.d == 3:
            L = sphere_bandwidth(self.beta, tol)
            self._s2_degree = L if L <= SPHERE_MAX_DEGREE else None
            if method in ("fast", "nufft"):          # the degree check, up front (the sums are made on first use)
                _sphere_nufft_degree(self.beta, tol, method)
        self._fast = self._nufft = None              # made on first use: see :attr:`fast`, :attr:`nufft`
        self._picks: dict = {}                       # method_for's answers by sizes
        if self.d == 2:
            self._fast = CircleSums(self.beta, tol, self.nufft_threads)

    @property
    def fast(self):
        """The compiled series (:class:`CircleSums` on S^1, :class:`SphereSums` on S^2, made on first use)
        or None."""
        if self._fast is None and self.d == 3 and self._s2_degree is not None:
            self._fast = SphereSums(self.beta, self.tol, self.nufft_threads)
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
        """Estimated seconds of one compiled direct evaluation (its chunks of evaluation points taken as run
        NUFFT_COST_THREADS at a time)."""
        return (_C_DIRECT * (self.d + 6) * n_src * chunk_rounds(n_eval, DIRECT_CHUNK, NUFFT_COST_THREADS)
                + _C_DIRECT_CALL)

    def costs(self, n_src: int, n_eval: int | None = None) -> dict[str, float]:
        """The cost model's seconds of every method offered here, for these sizes."""
        n_eval = n_src if n_eval is None else n_eval
        costs = {"direct": self.direct_cost(n_src, n_eval)}
        if self.d == 2:
            costs["fast"] = self._fast.cost(n_src, n_eval)
            costs["nufft"] = CircleNufftSums.cost(n_src, n_eval)
        elif self.d == 3 and self._s2_degree is not None:
            costs["fast"] = _sphere_series_cost(self._s2_degree, n_src, n_eval)
            costs["nufft"] = _sphere_nufft_cost(self._s2_degree, n_src, n_eval)
        return costs

    def method_for(self, n_src: int, n_eval: int | None = None) -> str:
        """The method ``fields`` uses for these sizes: "direct", "fast" or "nufft"."""
        if self.method != "auto":
            return self.method
        key = (n_src, n_eval)
        pick = self._picks.get(key)
        if pick is None:
            costs = self.costs(n_src, n_eval)
            if len(self._picks) >= 64:                 # a continuation's node count changes as nodes merge
                self._picks.clear()
            pick = self._picks[key] = min(costs, key=costs.get)
        return pick

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, d) at x, default at the sources y (self-interaction included)."""
        n_eval = y.shape[0] if x is None else x.shape[0]
        method = self.method_for(y.shape[0], n_eval)
        if method == "nufft":
            return self.nufft.fields(y, w, x)
        if method == "fast":
            return self.fast.fields(y, w, x)
        return compiled_direct_fields(y if x is None else x, y, w, self.beta, self.nufft_threads)

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
    y = as_points("y", y)
    return InteractionSums(y.shape[1], beta, method, **kwargs).fields(y, w, x)
