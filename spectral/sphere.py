"""Real spherical-harmonic basis on the sphere S^2 over SHTns (Gauss grid, transforms planned once).

Conventions
-----------
Points are x = (sin theta cos phi, sin theta sin phi, cos theta) with theta the *colatitude*
(0 at the north pole x = e_z) and phi the longitude. The unit tangents are

    e_theta = (cos theta cos phi, cos theta sin phi, -sin theta)   (pointing south, increasing theta)
    e_phi   = (-sin phi, cos phi, 0)                                  (pointing east, increasing phi)

A real function is represented by its coefficients c_lm, 0 <= m <= l <= L, in the orthonormal
complex harmonics of SHTns (``sht_orthonormal``, Condon–Shortley phase included):

    f(x) = sum_l [ c_l0 Y_l0(x) + 2 Re sum_{m >= 1} c_lm Y_lm(x) ],
    Y_lm(theta, phi) = Pbar_l^m(cos theta) exp(i m phi),   ∫ |Y_lm|^2 dA = 1,

with dA the *area* measure (total 4 pi). The constant 1 therefore has c_00 = sqrt(4 pi), and for
the uniform probability measure sigma = A / (4 pi) Parseval reads

    ∫ |f|^2 dsigma = (|c_l0|^2 + 2 sum_{m >= 1} |c_lm|^2, summed over l) / (4 pi).

Two coefficient layouts exist. SHTns stores them m-major (for m: for l >= m) — the *native*
layout, used by the transforms. The *canonical* layout is l-major, index l(l+1)/2 + m, so that the
coefficients of degree <= L are a prefix of those of degree <= 2L (exact re-representation by
zero-padding). :meth:`SphereBasis.to_canonical` / :meth:`SphereBasis.from_canonical` convert.

The Gauss grid of degree L is chosen here, from L alone, by :func:`dealiased_grid` — never by SHTns,
whose own choice (``set_grid(nl_order=2)``) rounds nlat to its SIMD vector length and so differs
between machines with different vector units (and so would their atoms). The rule keeps the 3/2 rule
(nlat >= 3(L+1)/2 latitudes, nphi >= 3(L+1) longitudes), so that the product of two fields of degree
<= L is analysed back to degree L without aliasing: nlat is the smallest multiple of 8 (the longest
SIMD vector, 8 doubles; shorter vectors divide it) >= max(3(L+1)/2, 32), nphi the smallest even
7-smooth integer >= 3(L+1). These are the sizes SHTns picks on an AVX-512 machine.

SHTns skips, for each order m, the latitudes near the poles where every Pbar_l^m (l <= L) is below a
threshold (its "polar optimisation"), and rounds the first latitude it keeps down to its SIMD vector
length: which terms are skipped depends on the CPU. At SHTns's default threshold, 1e-10, the skipped
terms are far above round-off, so builds for different CPUs would give different fields near the poles.
Every basis here sets the threshold to :data:`POLAR_THRESHOLD` = 1e-14: the skipped terms are then at
round-off, like the differences FFTW's SIMD codelets already make, and the transforms keep the speed of
the default (no threshold at all costs about a quarter more per transform).

Vector fields are given by their components (v_theta, v_phi) on
(e_theta, e_phi); SHTns's spheroidal/toroidal decomposition v = grad S + (curl of T e_r) gives
div v = -l(l+1) S_lm.

This module knows nothing of the model.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import scipy.fft


def _import_shtns_quietly():
    """Import shtns without its start-up banner on standard output (printed from C at import time,
    it would corrupt the output of command-line tools): fd 1 points to /dev/null meanwhile."""
    import ctypes
    import os
    import sys

    if sys.stdout is not None:              # None: the process started with fd 1 closed
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                         # fd 1 closed: closed again after the import
        saved = None
    null = os.open(os.devnull, os.O_WRONLY)         # fd 1 itself when fd 1 was closed
    try:
        if null != 1:
            os.dup2(null, 1)
        import shtns as module
        ctypes.CDLL(None).fflush(None)        # flush C stdio while it still points to /dev/null
    finally:
        if saved is None:
            os.close(1)
        else:
            os.dup2(saved, 1)
            os.close(saved)
        if null != 1:
            os.close(null)
    return module


shtns = _import_shtns_quietly()

__all__ = [
    "SphereBasis", "ncoef", "degree_of", "canonical_degrees", "native_to_canonical_index",
    "evaluate", "evaluate_grid", "evaluate_equiangular", "spectral_tail", "l2_norm", "resize", "equiangular_grid",
    "unit_vectors", "tangents", "grid_neighbours", "dealiased_grid", "fft_size", "gauss_nodes", "legendre_table",
]

_EFFORTS = ("FFTW_ESTIMATE", "FFTW_MEASURE", "FFTW_PATIENT", "FFTW_EXHAUSTIVE")
_SQRT_4PI = math.sqrt(4.0 * math.pi)
# SHTns refuses nlat < 4 x (its SIMD width in doubles) — 16 with AVX2, 32 with AVX-512 — by exiting the
# process; every grid made here has at least 32 latitudes, whatever the machine
_MIN_NLAT = 32
# nlat of a dealiased grid is a multiple of the longest SIMD vector (8 doubles, AVX-512), which every
# shorter vector divides: the grid SHTns would pick on the widest machine, picked on every machine
_NLAT_MULTIPLE = 8
#: SHTns's polar threshold for every basis made here (module docstring): Pbar_l^m below it are skipped
#: near the poles, at latitudes rounded to the SIMD width, so the threshold is kept at round-off
POLAR_THRESHOLD = 1e-14


# --- layouts ----------------------------------------------------------------------------------------
def ncoef(L: int) -> int:
    """Number of coefficients (L+1)(L+2)/2 of degree <= L (m >= 0 only)."""
    L = int(L)
    return (L + 1) * (L + 2) // 2


def degree_of(n: int) -> int:
    """The degree L with ncoef(L) == n; raises if n is not such a count."""
    L = int(round((math.sqrt(8.0 * n + 1.0) - 3.0) / 2.0))
    if L < 0 or ncoef(L) != n:
        raise ValueError(f"{n} is not a number of coefficients (L+1)(L+2)/2 of a degree L")
    return L


@lru_cache(maxsize=32)
def _canonical_lm(L: int) -> tuple[np.ndarray, np.ndarray]:
    l = np.repeat(np.arange(L + 1), np.arange(1, L + 2))
    m = np.arange(ncoef(L)) - l * (l + 1) // 2
    l.setflags(write=False)
    m.setflags(write=False)
    return l, m


def canonical_degrees(L: int) -> tuple[np.ndarray, np.ndarray]:
    """Degree l and order m of every canonical coefficient (index l(l+1)/2 + m), read-only arrays."""
    return _canonical_lm(int(L))


@lru_cache(maxsize=32)
def _native_lm(L: int) -> tuple[np.ndarray, np.ndarray]:
    # SHTns (mres = 1, mmax = lmax): for m in 0..L, for l in m..L
    m = np.repeat(np.arange(L + 1), np.arange(L + 1, 0, -1))
    start = m * (2 * L + 3 - m) // 2          # native index of (m, m)
    l = m + np.arange(ncoef(L)) - start
    l.setflags(write=False)
    m.setflags(write=False)
    return l, m


def native_to_canonical_index(L: int) -> np.ndarray:
    """perm with canonical[perm] == native: perm[i] = l_i (l_i + 1) / 2 + m_i for native index i."""
    l, m = _native_lm(int(L))
    return l * (l + 1) // 2 + m


# --- the basis --------------------------------------------------------------------------------------
def fft_size(n: int) -> int:
    """Smallest even 7-smooth integer (2^a 3^b 5^c 7^d, a >= 1) >= n: an FFT length fixed by n alone."""
    m = max(2, int(n))
    while True:
        if m % 2 == 0:
            r = m
            for p in (2, 3, 5, 7):
                while r % p == 0:
                    r //= p
            if r == 1:
                return m
        m += 1


def dealiased_grid(L: int) -> tuple[int, int]:
    """The Gauss grid (nlat, nphi) of degree L for dealiased quadratic products (the module docstring):
    nlat = the smallest multiple of 8 >= max(3(L+1)/2, 32), nphi = :func:`fft_size` (3(L+1)).

    A function of L alone: the same grid, hence the same numbers, on every machine."""
    L = int(L)
    need = max(math.ceil(1.5 * (L + 1)), _MIN_NLAT)
    nlat = -(-need // _NLAT_MULTIPLE) * _NLAT_MULTIPLE
    return nlat, fft_size(3 * (L + 1))


class SphereBasis:
    """Spherical harmonics of degree <= L on a Gauss grid, with one SHTns object planned once.

    Parameters
    ----------
    lmax : int
        Maximal degree L >= 1 (mmax = L).
    nlat, nphi : int, optional
        Grid size. Default: :func:`dealiased_grid` (L), the project's grid for dealiased quadratic
        products, the same on every machine. Give both to impose a grid (e.g. to share the grid of a
        higher-degree basis): even nlat > L with nlat >= 32, even nphi > 2L.
    threads : int
        OpenMP threads of the transforms (set explicitly, never taken from OMP_NUM_THREADS).
    effort : str
        ``"FFTW_ESTIMATE"`` initialises SHTns without timing its algorithm variants
        (``sht_quick_init``): the same algorithms, hence bit-identical results, on every run —
        which restarts rely on. Any other effort lets SHTns time its variants (``sht_gauss``).

    Notes
    -----
    Spatial arrays are float64, C-contiguous, shape (nlat, nphi) (phi varies fastest); latitude i
    has colatitude theta_i (north first), longitude j has phi_j = 2 pi j / nphi. Spectral arrays
    are complex128 in the native (m-major) layout of length ``nlm``. The transforms write into
    caller-provided arrays when given (``out=``), so a solver can keep its buffers. SHTns skips the
    near-polar terms below ``polar_threshold`` (:data:`POLAR_THRESHOLD`, 1e-14; module docstring).
    """

    def __init__(self, lmax: int, nlat: int | None = None, nphi: int | None = None, *, threads: int = 1,
                 effort: str = "FFTW_ESTIMATE") -> None:
        if isinstance(lmax, bool) or not isinstance(lmax, (int, np.integer)) or lmax < 1:
            raise ValueError(f"SphereBasis: lmax must be an integer >= 1, got {lmax!r}")
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"SphereBasis: threads must be an integer >= 1, got {threads!r}")
        if effort not in _EFFORTS:
            raise ValueError(f"SphereBasis: effort must be one of {_EFFORTS}, got {effort!r}")
        L = int(lmax)
        self.lmax = L
        self.threads = int(threads)
        self.effort = effort
        self.polar_threshold = POLAR_THRESHOLD
        self._flags = (shtns.sht_quick_init if effort == "FFTW_ESTIMATE" else shtns.sht_gauss) \
            | shtns.SHT_PHI_CONTIGUOUS
        if (nlat is None) != (nphi is None):
            raise ValueError("SphereBasis: give both nlat and nphi, or neither")
        if nlat is None:
            nlat, nphi = dealiased_grid(L)
        nlat, nphi = int(nlat), int(nphi)
        if nlat <= L or nphi <= 2 * L or nlat % 2 or nphi % 2 or nlat < _MIN_NLAT:
            # checked here because SHTns ends the whole process on a grid it rejects
            raise ValueError(f"SphereBasis: an imposed grid needs even nlat > L = {L}, nlat >= {_MIN_NLAT} "
                             f"and even nphi > 2L = {2 * L}, got nlat={nlat}, nphi={nphi}")
        sh = self._new_sht()
        sh.set_grid(nlat, nphi, flags=self._flags, polar_opt=self.polar_threshold)
        self.sht = sh
        self.nlat, self.nphi = int(sh.nlat), int(sh.nphi)
        if (self.nlat, self.nphi) != (nlat, nphi):
            raise RuntimeError(f"SHTns set the grid ({self.nlat}, {self.nphi}) instead of ({nlat}, {nphi})")
        if tuple(sh.spat_shape) != (self.nlat, self.nphi):
            raise RuntimeError(f"SHTns spatial layout {sh.spat_shape} is not (nlat, nphi)")
        self.nlm = int(sh.nlm)
        self.l = np.asarray(sh.l, dtype=np.int64)
        self.m = np.asarray(sh.m, dtype=np.int64)
        l_ref, m_ref = _native_lm(L)
        if self.nlm != ncoef(L) or not (np.array_equal(self.l, l_ref) and np.array_equal(self.m, m_ref)):
            raise RuntimeError("SHTns coefficient layout differs from the m-major layout this module assumes")
        self._perm = native_to_canonical_index(L)
        self.cos_theta = np.array(sh.cos_theta, dtype=float)
        self.theta = np.arccos(self.cos_theta)
        self.phi = 2.0 * np.pi * np.arange(self.nphi) / self.nphi
        half = np.asarray(sh.gauss_wts(), dtype=float)   # one hemisphere, north first, summing to 1
        wlat = np.concatenate([half, half[::-1]])
        # Gauss–Legendre weights sum to 2 over the full cos(theta) interval, 2 pi over phi: the
        # probability weight of a node is wlat_i / (2 nphi)
        self.lat_weights = wlat / 2.0
        self._weights: np.ndarray | None = None
        self._points: np.ndarray | None = None
        self._et: np.ndarray | None = None
        self._ep: np.ndarray | None = None

    def _new_sht(self):
        return shtns.sht(self.lmax, self.lmax, 1, shtns.sht_orthonormal, self.threads)

    # --- grid -------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.nlat, self.nphi)

    @property
    def weights(self) -> np.ndarray:
        """Quadrature weights (nlat, nphi) of the uniform probability measure: they sum to 1 and
        integrate exactly every polynomial of degree <= 2 nlat - 1 restricted to the sphere whose
        longitudinal modes are below nphi."""
        if self._weights is None:
            self._weights = np.repeat((self.lat_weights / self.nphi)[:, None], self.nphi, axis=1)
            self._weights.setflags(write=False)
        return self._weights

    @property
    def points(self) -> np.ndarray:
        """Grid nodes as unit vectors, shape (nlat, nphi, 3)."""
        if self._points is None:
            self._points = unit_vectors(self.theta[:, None], self.phi[None, :])
            self._points.setflags(write=False)
        return self._points

    @property
    def e_theta(self) -> np.ndarray:
        """Unit tangent e_theta at the nodes, (nlat, nphi, 3)."""
        if self._et is None:
            self._et, self._ep = tangents(self.theta[:, None], self.phi[None, :])
            self._et.setflags(write=False)
            self._ep.setflags(write=False)
        return self._et

    @property
    def e_phi(self) -> np.ndarray:
        """Unit tangent e_phi at the nodes, (nlat, nphi, 3)."""
        self.e_theta
        return self._ep

    @property
    def spacing(self) -> float:
        """Longitudinal spacing at the equator, 2 pi / nphi (radians) — about pi / nlat as well.

        Spectral truncation at degree L makes the advection operator's eigenvalues ~ |v| L
        uniformly on the sphere (no pole problem), and 2 pi / nphi ~ 2 pi / (3(L+1)) is the
        analogue of the circle's dealiased spacing 2 pi / M."""
        return 2.0 * np.pi / self.nphi

    def laplacian(self) -> np.ndarray:
        """Eigenvalues -l(l+1) of the Laplace–Beltrami operator, native layout (float64)."""
        return -(self.l * (self.l + 1)).astype(float)

    def spat_array(self, n: int | None = None) -> np.ndarray:
        """A zeroed spatial array (nlat, nphi), or (n, nlat, nphi) whose rows are valid SHTns arrays."""
        return np.zeros(self.shape if n is None else (n,) + self.shape)

    def spec_array(self) -> np.ndarray:
        return np.zeros(self.nlm, dtype=complex)

    # --- transforms -------------------------------------------------------------------------------
    def _spec_in(self, c: np.ndarray) -> np.ndarray:
        if c.dtype != np.complex128 or c.shape != (self.nlm,) or not c.flags.c_contiguous:
            c = np.ascontiguousarray(c, dtype=np.complex128)
            if c.shape != (self.nlm,):
                raise ValueError(f"expected {self.nlm} coefficients (native layout, L = {self.lmax}), "
                                 f"got shape {c.shape}")
        return c

    def _spat_in(self, f: np.ndarray) -> np.ndarray:
        if f.dtype != np.float64 or f.shape != self.shape or not f.flags.c_contiguous:
            f = np.ascontiguousarray(f, dtype=np.float64)
            if f.shape != self.shape:
                raise ValueError(f"expected a spatial array of shape {self.shape}, got {f.shape}")
        return f

    def synth(self, c: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Grid values (nlat, nphi) of the real field with native coefficients c."""
        c = self._spec_in(c)
        out = np.empty(self.shape) if out is None else out
        self.sht.SH_to_spat(c, out)
        return out

    def analys(self, f: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Native coefficients of grid values f (Gauss quadrature: exact for degree <= 2 nlat - 1 - L)."""
        f = self._spat_in(f)
        out = np.empty(self.nlm, dtype=complex) if out is None else out
        self.sht.spat_to_SH(f, out)
        return out

    def synth_grad(self, c: np.ndarray, out_theta: np.ndarray | None = None,
                   out_phi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Components (v_theta, v_phi) of grad f = (d_theta f, d_phi f / sin theta) on the grid.

        v_theta is the component along e_theta (southwards), v_phi along e_phi (eastwards); the
        sign convention is checked against finite differences in the tests.
        """
        c = self._spec_in(c)
        vt = np.empty(self.shape) if out_theta is None else out_theta
        vp = np.empty(self.shape) if out_phi is None else out_phi
        self.sht.SHsph_to_spat(c, vt, vp)
        return vt, vp

    def analys_vector(self, v_theta: np.ndarray, v_phi: np.ndarray, out_s: np.ndarray | None = None,
                      out_t: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Spheroidal and toroidal scalars (S, T) of the tangent field v_theta e_theta + v_phi e_phi."""
        vt, vp = self._spat_in(v_theta), self._spat_in(v_phi)
        S = np.empty(self.nlm, dtype=complex) if out_s is None else out_s
        T = np.empty(self.nlm, dtype=complex) if out_t is None else out_t
        self.sht.spat_to_SHsphtor(vt, vp, S, T)
        return S, T

    def divergence(self, v_theta: np.ndarray, v_phi: np.ndarray) -> np.ndarray:
        """Native coefficients of div v = -l(l+1) S_lm (the toroidal part is divergence-free)."""
        S, _ = self.analys_vector(v_theta, v_phi)
        return S * self.laplacian()

    # --- layouts ----------------------------------------------------------------------------------
    def to_canonical(self, u: np.ndarray) -> np.ndarray:
        """Canonical (l-major) coefficients from native ones (a new array)."""
        out = np.empty(self.nlm, dtype=complex)
        out[self._perm] = u
        return out

    def from_canonical(self, c: np.ndarray) -> np.ndarray:
        """Native coefficients from canonical ones of length ncoef(L) (a new array)."""
        c = np.asarray(c)
        if c.shape != (self.nlm,):
            raise ValueError(f"expected {self.nlm} canonical coefficients (L = {self.lmax}), got shape {c.shape}")
        return np.ascontiguousarray(c[self._perm], dtype=complex)


# --- geometry --------------------------------------------------------------------------------------
def unit_vectors(theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """(sin theta cos phi, sin theta sin phi, cos theta), broadcast, with the vector last."""
    theta, phi = np.broadcast_arrays(np.asarray(theta, float), np.asarray(phi, float))
    st = np.sin(theta)
    return np.stack([st * np.cos(phi), st * np.sin(phi), np.cos(theta)], axis=-1)


def tangents(theta: np.ndarray, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit tangents (e_theta, e_phi), broadcast, vector last."""
    theta, phi = np.broadcast_arrays(np.asarray(theta, float), np.asarray(phi, float))
    ct, st, cp, sp = np.cos(theta), np.sin(theta), np.cos(phi), np.sin(phi)
    et = np.stack([ct * cp, ct * sp, -st], axis=-1)
    ep = np.stack([-sp, cp, np.zeros_like(sp)], axis=-1)
    return et, ep


def gauss_nodes(nlat: int) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss grid of nlat Gauss–Legendre colatitudes (north first) x 2 nlat equispaced longitudes
    (phi_j = pi j / nlat), by numpy alone: unit vectors (2 nlat^2, 3), latitude-major, and the weights
    of the uniform probability measure (summing to 1). The nodes and weights of :class:`SphereBasis`
    (nlat, 2 nlat) to round-off; exact for polynomials of degree <= 2 nlat - 1 in cos(theta) and
    longitudinal modes below 2 nlat."""
    nlat = int(nlat)
    z, wz = np.polynomial.legendre.leggauss(nlat)
    nphi = 2 * nlat
    theta = np.arccos(z[::-1])
    x = unit_vectors(theta[:, None], 2.0 * np.pi * np.arange(nphi)[None, :] / nphi).reshape(-1, 3)
    return x, np.repeat(wz[::-1] / 2.0 / nphi, nphi)


def equiangular_grid(n: int) -> np.ndarray:
    """Unit vectors (n, 2n, 3) at theta_i = pi (i + 1/2) / n, phi_j = pi j / n (cell centres in theta:
    no node on a pole)."""
    n = int(n)
    th = np.pi * (np.arange(n) + 0.5) / n
    ph = np.pi * np.arange(2 * n) / n
    return unit_vectors(th[:, None], ph[None, :])


@lru_cache(maxsize=2)
def grid_neighbours(nlat: int, nphi: int, pole_nodes: bool = False) -> np.ndarray:
    """Edges (e, 2) of the latitude–longitude grid graph, nodes numbered i * nphi + j (one immutable
    array per grid, kept and shared by every caller: a read-only view of a read-only array, which no
    flag can make writeable again).

    Eight neighbours per node: along phi (periodic), along theta and diagonally (rings i +- 1,
    longitudes j - 1, j, j + 1), and across each pole: a node of the first (last) ring is joined to
    the nodes of the same ring at phi + pi and its two longitude neighbours, its neighbours through the
    pole. The diagonals matter for steepest ascent: on a 4-neighbour graph a narrow ridge oblique to
    the grid has spurious local maxima (each ridge node's next ridge node is a diagonal), which split
    one peak into several basins. With
    ``pole_nodes`` two extra nodes, nlat * nphi (north pole) and nlat * nphi + 1 (south pole), are
    joined to every node of the first (last) ring: a peak at a pole then has one top instead of a
    ring of nphi nearly equal values whose round-off would split its basin.
    """
    idx = np.arange(nlat * nphi).reshape(nlat, nphi)
    e_phi = np.stack([idx.ravel(), np.roll(idx, -1, axis=1).ravel()], axis=1)
    e_th = [np.stack([idx[:-1].ravel(), np.roll(idx, s, axis=1)[1:].ravel()], axis=1) for s in (0, 1, -1)]
    half = nphi // 2
    across = [np.stack([idx[r, :half], idx[r, half:2 * half]], axis=1) for r in (0, nlat - 1)]
    # (j, j + half + 1) over all j is also every (j, j + half - 1): both diagonals through the pole
    across += [np.stack([idx[r], np.roll(idx[r], -(half + 1))], axis=1) for r in (0, nlat - 1)]
    parts = [e_phi, *e_th, *across]
    if pole_nodes:
        n = nlat * nphi
        parts += [np.stack([np.full(nphi, n), idx[0]], axis=1), np.stack([np.full(nphi, n + 1), idx[-1]], axis=1)]
    edges = np.concatenate(parts)
    edges.setflags(write=False)
    return edges[:]


# --- operations on canonical coefficients (no transform needed) -----------------------------------
@lru_cache(maxsize=16)
def _recurrence(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a_lm, b_lm of Pbar_l^m = a_lm x Pbar_{l-1}^m - b_lm Pbar_{l-2}^m (m < l), and the sectoral factors."""
    l = np.arange(L + 1, dtype=float)[:, None]
    m = np.arange(L + 1, dtype=float)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.sqrt((4 * l * l - 1) / (l * l - m * m))
        b = np.sqrt((2 * l + 1) * ((l - 1) ** 2 - m * m) / ((2 * l - 3) * (l * l - m * m)))
    a[~np.isfinite(a)] = 0.0
    b[~np.isfinite(b) | (m >= l - 1)] = 0.0
    ll = np.arange(1, L + 1, dtype=float)
    sect = np.concatenate([[0.0], -np.sqrt((2 * ll + 1) / (2 * ll))])   # Condon–Shortley phase
    for arr in (a, b, sect):
        arr.setflags(write=False)
    return a, b, sect


def _check_coefficients(c) -> tuple[np.ndarray, int]:
    c = np.asarray(c)
    if c.ndim != 1:
        raise ValueError(f"coefficients must be a 1-D canonical array, got shape {c.shape}")
    return c.astype(complex, copy=False), degree_of(c.size)


def _legendre_rows(L: int, cos_t: np.ndarray, sin_t: np.ndarray):
    """Yield (l, P) for l = 0..L with P[m] = Pbar_l^m at the given colatitudes, m = 0..l (a view, valid
    until the next step), orthonormal for the area measure with the Condon–Shortley phase.

    The three-term recurrence in l runs for every order m at once (L Python iterations, O(L^2 n)
    work). Its sectoral start sin^m(theta) underflows only where every Pbar_l^m, l <= L, is below
    1e-300, which holds for L up to about 1900."""
    a, b, sect = _recurrence(L)
    n = cos_t.size
    P2 = np.zeros((L + 1, n))            # Pbar_{l-2}^m
    P1 = np.zeros((L + 1, n))            # Pbar_{l-1}^m
    P = np.zeros((L + 1, n))
    P[0] = 1.0 / _SQRT_4PI
    yield 0, P[:1]
    for l in range(1, L + 1):
        P2, P1, P = P1, P, P2
        # orders m < l by the three-term recurrence (b_{l,l-1} = 0: the first step from the sectoral term)
        np.multiply(P1[:l], cos_t, out=P[:l])
        P[:l] *= a[l, :l, None]
        P[:l] -= b[l, :l, None] * P2[:l]
        np.multiply(P1[l - 1], sin_t, out=P[l])
        P[l] *= sect[l]
        yield l, P[: l + 1]


def legendre_table(L: int, cos_t: np.ndarray) -> np.ndarray:
    """Pbar_l^m(cos theta) for 0 <= m <= l <= L at the colatitudes given, shape (L + 1, L + 1, n) indexed
    [l, m, i] (zero for m > l): the associated Legendre functions of this module's harmonics, orthonormal
    for the area measure (2 pi ∫ Pbar_l^m Pbar_k^m d cos(theta) = delta_lk), Condon–Shortley phase."""
    cos_t = np.asarray(cos_t, dtype=float).ravel()
    sin_t = np.sqrt(np.maximum(1.0 - cos_t * cos_t, 0.0))
    out = np.zeros((int(L) + 1, int(L) + 1, cos_t.size))
    for l, P in _legendre_rows(int(L), cos_t, sin_t):
        out[l, : l + 1] = P
    return out


def _order_sums(c: np.ndarray, L: int, cos_t: np.ndarray, sin_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A_m(x) = sum_l c_lm Pbar_l^m(x) for m = 0..L at the colatitudes given, as (real, imag) (L+1, n)."""
    n = cos_t.size
    cr = np.ascontiguousarray(c.real)
    ci = np.ascontiguousarray(c.imag)
    Ar = np.zeros((L + 1, n))
    Ai = np.zeros((L + 1, n))
    for l, P in _legendre_rows(L, cos_t, sin_t):
        k = l * (l + 1) // 2
        Ar[: l + 1] += cr[k: k + l + 1, None] * P
        Ai[: l + 1] += ci[k: k + l + 1, None] * P
    return Ar, Ai


#: ducc0's precision for :func:`point_coefficients` (its floor in double precision is 2e-13); its errors stay
#: near 1e-15 of sum |w_i|
POINT_EPS = 3e-13
#: ducc0's oversampling factor there, pinned by a window of +-0.01 that holds one factor of its kernel table:
#: left to itself ducc0 picks its kernel by the thread count, the point count and the SIMD width
POINT_SIGMA = 2.0


def point_coefficients(x: np.ndarray, w: np.ndarray, L: int) -> np.ndarray:
    """Canonical coefficients sum_i w_i conj(Y_lm(x_i)), l <= L, of the weighted point set (x_i, w_i).

    The adjoint of :func:`evaluate`: for a measure mu = sum_i w_i delta_{x_i} these are ∫ conj(Y_lm) dmu
    (Y_lm orthonormal for the area measure). By ducc0's adjoint spherical harmonic transform at arbitrary
    points (``ducc0.sht.adjoint_synthesis_general``: an interpolation on the doubled sphere, precision
    :data:`POINT_EPS`, one thread: the same bits on every call), O(n + L^3); faster than direct sums of
    the harmonics from n = 20 points on (measured, L = 16 .. 255).
    """
    import ducc0

    x = np.asarray(x, dtype=float)
    w = np.asarray(w, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3 or w.shape != (x.shape[0],):
        raise ValueError(f"points must have shape (n, 3) and weights (n,), got {x.shape} and {w.shape}")
    L = int(L)
    out = np.zeros(ncoef(L), dtype=complex)
    if x.shape[0] == 0:                        # ducc0 refuses an empty point set
        return out
    cos_t, sin_t, phi = _angles(x)
    loc = np.stack([np.arctan2(sin_t, cos_t), np.where(phi < 0.0, phi + 2.0 * math.pi, phi)], axis=1)
    a = ducc0.sht.adjoint_synthesis_general(map=w[None, :], spin=0, lmax=L, loc=loc, epsilon=POINT_EPS,
                                            nthreads=1, sigma_min=POINT_SIGMA - 0.01,
                                            sigma_max=POINT_SIGMA + 0.01)
    # ducc0 stores the orders m = 0..L, each for l = m..L (SHTns's native order), with the same
    # Condon–Shortley phase
    out[native_to_canonical_index(L)] = a[0]
    return out


def _angles(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cos and sin of the colatitude and the longitude of points x (n, 3) (normalised on the fly)."""
    r = np.linalg.norm(x, axis=1)
    r = np.where(r > 0, r, 1.0)
    return np.clip(x[:, 2] / r, -1.0, 1.0), np.hypot(x[:, 0], x[:, 1]) / r, np.arctan2(x[:, 1], x[:, 0])


def _block(L: int) -> int:
    # five (L+1) x block float arrays: keep them around 40 MB
    return max(64, (1 << 20) // (L + 1))


def evaluate(c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """f at unit vectors x (n, 3) from canonical coefficients c (direct summation, exact to round-off).

    Vectorised over points and orders (an associated-Legendre recurrence in numpy), in
    memory-bounded blocks of points; cost O(L^2 n).
    """
    c, L = _check_coefficients(c)
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"points on S^2 must have shape (n, 3), got {x.shape}")
    cos_t, sin_t, phi = _angles(x)
    out = np.empty(x.shape[0])
    mm = np.arange(L + 1)
    wm = np.where(mm > 0, 2.0, 1.0)[:, None]
    blk = _block(L)
    for s in range(0, x.shape[0], blk):
        sl = slice(s, s + blk)
        Ar, Ai = _order_sums(c, L, cos_t[sl], sin_t[sl])
        mp = mm[:, None] * phi[None, sl]
        # f = sum_m w_m Re(A_m e^{i m phi})
        out[sl] = (wm * (Ar * np.cos(mp) - Ai * np.sin(mp))).sum(axis=0)
    return out


def evaluate_grid(c: np.ndarray, theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """f on the tensor grid theta (nt,) x phi (np,), shape (nt, np): the Legendre recurrence runs on
    the nt colatitudes only, the longitudes cost one (nt, L+1) x (L+1, np) contraction."""
    c, L = _check_coefficients(c)
    theta = np.asarray(theta, dtype=float).ravel()
    phi = np.asarray(phi, dtype=float).ravel()
    Ar, Ai = _order_sums(c, L, np.cos(theta), np.abs(np.sin(theta)))
    mm = np.arange(L + 1)
    wm = np.where(mm > 0, 2.0, 1.0)[:, None]
    mp = mm[:, None] * phi[None, :]
    # einsum, not BLAS: small threaded BLAS products can cost milliseconds of thread wake-up
    return np.einsum("mi,mj->ij", wm * Ar, np.cos(mp)) - np.einsum("mi,mj->ij", wm * Ai, np.sin(mp))


def evaluate_equiangular(c: np.ndarray, n: int) -> np.ndarray:
    """f on :func:`equiangular_grid` (n, 2n): the longitudinal sums by one FFT of length 2n per
    colatitude, orders m >= 2n folded onto m mod 2n (exact on the 2n equispaced longitudes)."""
    c, L = _check_coefficients(c)
    n = int(n)
    th = np.pi * (np.arange(n) + 0.5) / n
    Ar, Ai = _order_sums(c, L, np.cos(th), np.sin(th))
    N = 2 * n
    B = np.zeros((N, n), dtype=complex)
    wm = np.where(np.arange(L + 1) > 0, 2.0, 1.0)[:, None]
    np.add.at(B, np.arange(L + 1) % N, wm * (Ar + 1j * Ai))
    # f_ij = Re sum_m B_m(theta_i) exp(2 pi i m j / N)
    return np.real(scipy.fft.ifft(B, axis=0, norm="forward")).T.copy()


def _power(c: np.ndarray) -> tuple[np.ndarray, int]:
    """|c_lm|^2 with m > 0 counted twice, canonical order, and the degree."""
    c, L = _check_coefficients(c)
    _, m = canonical_degrees(L)
    a2 = np.abs(c) ** 2
    a2[m > 0] *= 2.0
    return a2, L


def l2_norm(c: np.ndarray) -> float:
    """||f||_{L^2(sigma)} for the uniform probability measure: sqrt(sum |c_lm|^2 (m > 0 twice) / 4 pi)."""
    a2, _ = _power(c)
    return float(math.sqrt(a2.sum()) / _SQRT_4PI)


def tail_cut(L: int, fraction: float = 1.0 / 3.0) -> int:
    """The lowest degree of the spectral tail: floor((1 - fraction)(L + 1))."""
    return int(math.floor((1.0 - fraction) * (L + 1)))


def spectral_tail(c: np.ndarray, fraction: float = 1.0 / 3.0) -> float:
    """Relative L^2 size of the degrees l >= floor((1 - fraction)(L + 1)) (the top ``fraction`` of the
    L + 1 degrees): sqrt(E_tail / E_total), m > 0 counted twice."""
    a2, L = _power(c)
    cut = tail_cut(L, fraction)
    total = a2.sum()
    return float(math.sqrt(a2[ncoef(cut - 1):].sum() / total)) if total > 0 else 0.0


def resize(c: np.ndarray, L: int) -> np.ndarray:
    """The same function at degree L (zero-padding is exact; truncation drops the degrees > L)."""
    c = np.asarray(c)
    out = np.zeros(ncoef(L), dtype=complex)
    n = min(out.size, c.size)
    out[:n] = c[:n]
    return out
