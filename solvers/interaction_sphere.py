"""Interaction sums on S^2 (d = 3): the addition theorem, by compiled recurrences (:class:`SphereSums`) and
through ducc0's spherical harmonic transforms at arbitrary points (:class:`SphereNufftSums`); see
:mod:`solvers.interaction` for the fields and the choice between the methods.

Both expand the kernel by the addition theorem for the orthonormal harmonics (Funk–Hecke, The model §2),

    exp(beta(<x,y> - 1)) = 4 pi sum_l lambda_l sum_{|m|<=l} Y_lm(x) conj(Y_lm(y)),

lambda_l = sqrt(pi/(2 beta)) ive(l + 1/2, beta), up to the degree L of :func:`sphere_bandwidth`.
"""
from __future__ import annotations


import ducc0
import numpy as np

from spectral.multipliers import kernel_bandwidth, potential_multipliers, zonal_multipliers
from . import validators as check
from ._chunks import chunk_slices, map_chunks, shared_pool
from ._compiled import kernels
from ._sums import (DEFAULT_TOL, NUFFT_COST_THREADS, NUFFT_EPS_MIN, SERIES_CHUNK, SeriesSums, as_points, as_weights,
                    chunk_rounds)

__all__ = ["SphereSums", "SphereNufftSums", "sphere_bandwidth", "sphere_nufft_chunk", "sphere_nufft_cuts",
           "SPHERE_MAX_DEGREE", "SPHERE_NUFFT_SIGMA", "PAIR_MIN_POINTS"]

#: ducc0's oversampling factor of the S^2 NUFFT sums, passed as a window of +-0.01 that holds a single factor of
#: ducc0's kernel table, where ducc0 then takes the narrowest kernel of that factor meeting the precision (left
#: to itself ducc0 picks kernel and factor by a cost model of the thread count, the point count and the SIMD
#: width, so other thread counts or machines would get other bits); the factor moved the time by < 10% between
#: 1.6 and 2.5 (N = 10^2 .. 10^6, L = 15 .. 90)
SPHERE_NUFFT_SIGMA = 2.0
#: the S^2 NUFFT sums are offered up to this degree (beta up to about 400; beyond it only the direct sums): ducc0
#: goes higher, but their accuracy and cost model are tested up to beta = 100 (L = 90) only
SPHERE_MAX_DEGREE = 200
#: fewest evaluation points whose two S^2 syntheses (Psi and G) run on two threads when they are one chunk
#: (below, the hand-over costs about what it saves)
PAIR_MIN_POINTS = 2048

# the cost model of the S^2 methods (seconds; see solvers.interaction for the units and the fit)
_C_S2NUFFT = 2.61e-7
_C_S2NUFFT_CALL = 6.27e-4
_C_S2NUFFT_DEGREE = 1.05e-6
_C_S2SERIES_SRC = 7.66e-10
_C_S2SERIES_EVAL = 1.38e-9
_C_S2SERIES_CALL = 3.39e-5

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
    """The most points per ducc0 call of the S^2 NUFFT sums: 2^16, or the power of two >= 16 L^2 if larger.

    Each call has a fixed cost of ~(0.07 + 1.3e-4 L^2) ms against ~0.1 us per point (the adjoint and both
    syntheses, measured), so a chunk of >= 16 L^2 points keeps it near a tenth of the chunk's time; 2^16 keeps
    the calls of N = 10^6 points to 16 per transform. The points are cut into the fewest chunks of at most
    this many, of equal sizes (:func:`sphere_nufft_cuts`), so that two threads share N ~ 10^5 points evenly.
    """
    return max(2 ** 16, 1 << (16 * L * L - 1).bit_length())


def sphere_nufft_cuts(n: int, L: int) -> int:
    """Points per chunk of n points in the S^2 NUFFT sums: ceil(n / k) for the fewest chunks k of at most
    :func:`sphere_nufft_chunk` points. Depends on n and L only, so the chunks (and the order of the sums) are
    fixed by the point count and beta."""
    most = sphere_nufft_chunk(L)
    k = -(-max(n, 1) // most)
    return -(-max(n, 1) // k)


def _sphere_nufft_degree(beta: float, tol: float, method: str = "nufft") -> int:
    """:func:`sphere_bandwidth`, refused above SPHERE_MAX_DEGREE (``method`` names the sums in the message)."""
    L = sphere_bandwidth(beta, tol)
    if L > SPHERE_MAX_DEGREE:
        raise ValueError(f"{method} sums on S^2 need degree L = {L} at beta = {beta:g}, above the "
                         f"supported {SPHERE_MAX_DEGREE}; use method='direct'")
    return L


def _sphere_nufft_cost(L: int, n_src: int, n_eval: int) -> float:
    """Estimated seconds of one :meth:`SphereNufftSums.fields`: the adjoint synthesis at the sources, the two
    syntheses at the evaluation points, and each call's fixed cost (one per chunk), the chunks of a pass taken
    as run NUFFT_COST_THREADS at a time (as the S^1 sums')."""
    def one_pass(n: int) -> tuple[int, int]:
        chunk = sphere_nufft_cuts(n, L)
        return chunk_rounds(n, chunk, NUFFT_COST_THREADS), -(-(-(-max(n, 1) // chunk)) // NUFFT_COST_THREADS)
    src, rounds_src = one_pass(n_src)
    ev, rounds_ev = one_pass(n_eval)
    return (_C_S2NUFFT * (src + 2 * ev)
            + (rounds_src + 2 * rounds_ev) * (_C_S2NUFFT_CALL + _C_S2NUFFT_DEGREE * L * L) / 3.0)


def _sphere_series_cost(L: int, n_src: int, n_eval: int) -> float:
    """Estimated seconds of one :meth:`SphereSums.fields`: per (l, m) a source and an evaluation point, and a
    fixed cost per call; the chunks taken as run NUFFT_COST_THREADS at a time (as the S^1 NUFFT's)."""
    nlm = (L + 1) * (L + 2) / 2
    src = chunk_rounds(n_src, SERIES_CHUNK, NUFFT_COST_THREADS)
    ev = chunk_rounds(n_eval, SERIES_CHUNK, NUFFT_COST_THREADS)
    return nlm * (_C_S2SERIES_SRC * src + _C_S2SERIES_EVAL * ev) + _C_S2SERIES_CALL


def legendre_tables(L: int) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence of the reduced normalised Legendre functions up to degree L (the layout of m, then
    l = m .. L, ducc0's):

        P_l^m(z) = sqrt((2l + 1) (l - m)! / (l + m)!) d^m P_l / dz^m (z)      (P_l the Legendre polynomials),

    so that P_l^m(cos theta) sin^m theta are the associated Legendre functions of that normalisation and
    sum_m eps_m P_l^m(z) P_l^m(z') Re(u^m conj(u')^m) = (2l + 1) P_l(<x, x'>) (u = x_0 + i x_1, eps_0 = 1,
    eps_m = 2: the addition theorem). Returns (ab, pmm): ab (2, nlm) the coefficients of
    P_l^m = a (z P_{l-1}^m) - b P_{l-2}^m for l > m (a = sqrt((4l^2 - 1) / (l^2 - m^2)),
    b = sqrt((2l + 1)((l - 1)^2 - m^2) / ((2l - 3)(l^2 - m^2))), b = 0 at l = m + 1; both 0 at l = m) and
    pmm (L + 1) the constants P_m^m = prod_{k<=m} sqrt((2k + 1) / (2k)).
    """
    deg = np.concatenate([np.arange(m, L + 1) for m in range(L + 1)]).astype(float)
    order = np.concatenate([np.full(L + 1 - m, m) for m in range(L + 1)]).astype(float)
    ab = np.zeros((2, deg.size))
    up = deg > order
    l, m = deg[up], order[up]
    ab[0, up] = np.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))
    two = deg > order + 1
    l, m = deg[two], order[two]
    ab[1, two] = np.sqrt((2.0 * l + 1.0) * ((l - 1.0) ** 2 - m * m) / ((2.0 * l - 3.0) * (l * l - m * m)))
    k = np.arange(1, L + 1)
    pmm = np.concatenate([[1.0], np.cumprod(np.sqrt((2.0 * k + 1.0) / (2.0 * k)))])
    return ab, pmm


class SphereSums(SeriesSums):
    """Interaction sums on S^2 through the addition theorem, by compiled recurrences (no angles, no transforms).

    With the reduced Legendre functions P_l^m of :func:`legendre_tables` and u = x_0 + i x_1, z = x_2
    (P_l^m(z) u^m is a polynomial in x: the harmonics without angles, finite at the poles):

        C_lm = sum_j w_j P_l^m(z_j) conj(u_j)^m                                   (m >= 0, l = m .. L)
        Psi(x) = lambda_0 C_00 + beta Phi(x),  Phi(x) = Re sum_{l>=1, m} eps_m g_l C_lm P_l^m(z) u^m,
        G(x) = grad_S Phi = P_x grad Phi,

    g_l = lambda_l / beta (exact at beta = 0); grad Phi is the gradient of that polynomial in R^3, which needs
    the derivative d/dz P_l^m = sqrt((l - m)(l + m + 1)) P_l^{m+1} (the next column) and d/du u^m = m u^{m-1}.
    O((N + M) L^2 / 2): the coefficients take ~7 and the evaluation ~12 floating-point operations per point
    and (l, m), vectorised over points (``solvers/_kernels.c``); cheaper than ducc0's transforms for up to a
    few thousand points at moderate beta, and exact to round-off (no interpolation).

    Reproducibility: the coefficients of fixed chunks of SERIES_CHUNK sources are added in chunk order, and
    each evaluation point is computed on its own: the same bits for any ``threads`` and any SIMD width.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    tol : float
        Degrees with lambda_l and (l + 1) g_l below tol * lambda_0 are dropped (:func:`sphere_bandwidth`).
    threads : int
        Threads working on chunks of points (the result does not depend on it).
    """

    d = 3

    def __init__(self, beta: float, tol: float = DEFAULT_TOL, threads: int = 1) -> None:
        self.beta = float(beta)
        self.L = L = _sphere_nufft_degree(self.beta, tol, "fast")
        self.threads = check.integer("threads", threads, ge=1)
        ab, self._pmm = legendre_tables(L)
        deg = np.concatenate([np.arange(m, L + 1) for m in range(L + 1)])
        order = np.concatenate([np.full(L + 1 - m, m) for m in range(L + 1)])
        g = potential_multipliers(self.beta, 3, L)
        dmult = np.where(deg > 0, np.where(order > 0, 2.0, 1.0) * g[deg], 0.0)
        emult = dmult * np.sqrt((deg - order) * (deg + order + 1.0))
        # the tables of the compiled loops: the recurrence (a, b), then the multipliers of Phi's series (D = dmult
        # C) and of its z-derivative (E = emult C)
        self._rec = np.ascontiguousarray(np.vstack([ab, dmult, emult]))
        self._lam0 = float(zonal_multipliers(self.beta, 3, 0)[0])
        self.ncoef = deg.size

    def cost(self, n_src: int, n_eval: int) -> float:
        """Estimated seconds of one :meth:`fields` call."""
        return _sphere_series_cost(self.L, n_src, n_eval)

    def _coefficients_into(self, y: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        """C_lm (ncoef complex, the layout of m, then l = m .. L) of the sources y (N, 3) with weights w."""
        kernels.sphere_coefficients(y, w, self._rec, self._pmm, out)

    def _evaluate_into(self, x: np.ndarray, c: np.ndarray, psi: np.ndarray, G: np.ndarray) -> None:
        kernels.sphere_evaluate(x, self._rec, self._pmm, c, self._lam0, self.beta, psi, G)


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
    e_theta, e_phi taken at the same phi (G is the limit along that meridian). The angles and the tangent
    vectors come from compiled loops (``sphere_angles``: an arctangent of its own, the same bits on every
    CPU; ``sphere_tangent``).

    Reproducibility: ducc0's multithreaded calls are not reproducible (its adjoint adds the points into its
    grid from several threads in a run-dependent order; its synthesis on two threads differed in bits from
    one), so every call is single-threaded, with the kernel pinned (SPHERE_NUFFT_SIGMA); the sources come
    in fixed chunks (:func:`sphere_nufft_cuts`: fixed by N and L) whose coefficients are added in chunk order, and
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
            kernels.sphere_angles(y[c], loc[c])
            return ducc0.sht.adjoint_synthesis_general(map=w[None, c], spin=0, loc=loc[c], **self._args)
        parts = map_chunks(one, y.shape[0], sphere_nufft_cuts(y.shape[0], self.L), self.threads, "attnpde-s2nufft")
        a = parts[0]
        for p in parts[1:]:                       # in chunk order: the same bits for any thread count
            a += p
        return a

    def fields(self, y: np.ndarray, w: np.ndarray, x: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Psi (M,) and G (M, 3) at x (default: at the sources y)."""
        y = as_points("y", y, 3)
        w = as_weights(w, y.shape[0])
        same = x is None
        x = y if same else as_points("x", x, 3)
        if y.shape[0] == 0 or x.shape[0] == 0:      # ducc0 refuses an empty point set; the sums are 0
            return np.zeros(x.shape[0]), np.zeros_like(x)
        loc_y = np.empty((y.shape[0], 2))
        a = self.coefficients(y, w, loc_y)
        chunk = sphere_nufft_cuts(x.shape[0], self.L)
        if same:
            loc = loc_y
        else:
            loc = np.empty((x.shape[0], 2))
            map_chunks(lambda j, c: kernels.sphere_angles(x[c], loc[c]), x.shape[0], chunk, self.threads,
                       "attnpde-s2nufft")
        a_psi, a_grad = self._lam * a, self._g * a
        psi, G = np.empty(x.shape[0]), np.empty_like(x)
        cuts = chunk_slices(x.shape[0], chunk)

        def task(k: int) -> None:
            c = cuts[k // 2]
            if k % 2 == 0:
                ducc0.sht.synthesis_general(alm=a_psi, spin=0, loc=loc[c], map=psi[None, c], **self._args)
            else:
                g = ducc0.sht.synthesis_general(alm=a_grad, spin=1, loc=loc[c], mode="DERIV1", **self._args)
                kernels.sphere_tangent(g, x[c], G[c])
        tasks = range(2 * len(cuts))
        if self.threads >= 2 and (len(cuts) > 1 or x.shape[0] >= PAIR_MIN_POINTS):
            list(shared_pool(self.threads, "attnpde-s2nufft").map(task, tasks))
        else:
            for k in tasks:
                task(k)
        return psi, G


