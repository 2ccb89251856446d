"""The mean-field PDE on the sphere S^2, discretised in spherical harmonics over SHTns.

The model and its spectral facts: docs/model.md §1–§4; the solver's behaviour: docs/numerics.md.

State: the coefficients of rho in SHTns's native (m-major) layout, orthonormal harmonics for the
area measure (``spectral.sphere`` conventions: the uniform probability density has c_00 = sqrt(4 pi)).
Right-hand side, evaluated pseudo-spectrally on the dealiased Gauss grid (nlat >= 3(L+1)/2,
nphi >= 3(L+1)):

    rho = synth(c)
    Phi_lm = (lambda_l / beta) c_lm,  G = grad Phi            (gradient synthesis; exact multipliers)
    Psi_lm = lambda_l c_lm                                    (SA only; scalar synthesis)
    v = Model.velocity(G, Psi, drift)   on (e_theta, e_phi)   (drift sampled on the grid)
    (S, T) = vector analysis of rho v,   d c_lm / dt = l(l+1) S_lm - nu l(l+1) c_lm

(-div(rho v) = l(l+1) S; the last term is treated exactly by the integrating-factor stepper.)
The kernel fields only carry the degrees whose multipliers exceed 1e-17 of the largest; when that
bandwidth La is below L they are synthesised by a second SHTns object of degree La on the same
grid, which costs a fraction of a degree-L transform. The l = 0 coefficient is untouched by the
divergence: mass is conserved to round-off.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from spectral import sphere
from spectral.multipliers import kernel_bandwidth
from spectral.sphere import SphereBasis
from .atoms import DEFAULT_PROMINENCE, Atoms, atoms_from_graph, shared_graph
from .model import Model, density_values
from .spaces import MIN_DEGREE

__all__ = ["SphereDiscretization", "SphereSpace"]

# Multipliers below this fraction of the largest one are dropped: the kernel fields they would add
# are below double-precision round-off of the fields themselves.
_KERNEL_TOL = 1e-17
_SQRT_4PI = math.sqrt(4.0 * math.pi)


@lru_cache(maxsize=8)
def _basis(L: int, nlat: int | None = None, nphi: int | None = None) -> SphereBasis:
    """Single-threaded bases for the coefficient-space operations (projection, atoms), kept for reuse."""
    return SphereBasis(L, nlat, nphi, threads=1)


@lru_cache(maxsize=8)
def _native_to_canonical(L: int) -> np.ndarray:
    """``sphere.native_to_canonical_index(L)``, read-only and kept: the resolution control converts the
    state to canonical order after every step."""
    perm = sphere.native_to_canonical_index(L)
    perm.flags.writeable = False
    return perm


class SphereSpace:
    """Operations on canonical coefficients of S^2 (no solver state): evaluation, grids, atoms.

    Canonical layout: orthonormal-harmonic coefficients c_lm (area normalisation, c_00 = sqrt(4 pi)
    for the uniform probability density), l-major index l(l+1)/2 + m, m >= 0; a representation of
    lower degree is a prefix. ``degree`` is the maximal harmonic degree L.
    """

    d = 3
    default_max_degree = 511
    default_handoff_degree = 127        # the continuation's largest Eulerian resolution
    #: the continuation's nodes: the Gauss grid 64 x 128, a quarter of the nodes (and of the cost of a velocity
    #: evaluation) of the grid nlat = L + 1 at the handoff degree L = 127
    default_nodes = 8192
    basin_floor_nodes = 1               # one node's weight; the rerun's extrapolation covers the boundary curve
    default_particle_degree = 255       # degree of a particle measure's coefficients (comparison)
    has_cdf = False
    resolution_symbol = "L"
    default_output_points = 96
    min_degree = MIN_DEGREE
    mass_coefficient = _SQRT_4PI     # c_00 of the uniform probability density

    @staticmethod
    def ncoef(degree: int) -> int:
        """(L+1)(L+2)/2 coefficients of degree <= L."""
        return sphere.ncoef(degree)

    @staticmethod
    def degree_of(ncoef: int) -> int:
        """The degree L of ``ncoef`` = (L+1)(L+2)/2 canonical coefficients."""
        return sphere.degree_of(ncoef)

    @staticmethod
    def degree_holding(harmonic_degree: int) -> int:
        """The resolution that holds every degree <= ``harmonic_degree``: L = that."""
        return int(harmonic_degree)

    @staticmethod
    def computational_grid(degree: int) -> tuple[int, int]:
        """(nlat, nphi): the dealiased Gauss grid of degree L (``spectral.sphere.dealiased_grid``), fixed
        by L alone."""
        return sphere.dealiased_grid(degree)

    @staticmethod
    def output_grid(npoints: int) -> np.ndarray:
        """Equiangular grid of unit vectors (n, 2n, 3): theta_i = pi (i + 1/2) / n, phi_j = pi j / n."""
        return sphere.equiangular_grid(npoints)

    @staticmethod
    def evaluate(c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """rho at unit vectors x (n, 3) from canonical coefficients (direct summation, exact)."""
        return sphere.evaluate(c, x)

    @staticmethod
    def on_output_grid(c: np.ndarray, npoints: int) -> np.ndarray:
        """rho on :meth:`output_grid` (npoints, 2 npoints)."""
        return sphere.evaluate_equiangular(c, npoints)

    @staticmethod
    def atoms(c: np.ndarray, threshold: float = 10.0, method: str = "basin", min_mass: float = 0.0,
              smoothing: float | str | None = "auto", prominence: float = DEFAULT_PROMINENCE,
              grid: tuple[int, int] | None = None) -> Atoms:
        """Atoms of rho from its coefficients, on the computational Gauss grid of its degree
        (``spectral.sphere.dealiased_grid``, or ``grid`` = (nlat, nphi) if given) with the grid's
        quadrature weights (see ``solvers.atoms``, where ``prominence`` is defined); positions are unit
        vectors.

        The graph joins neighbours along each ring (periodic) and between rings, and adds the two
        poles as nodes of weight 0 (rho there evaluated exactly) joined to the first / last ring, so
        that a peak sitting on a pole is one atom. ``smoothing``: peaks and basins (for the level method the
        level set) are those of rho smoothed by the heat kernel at this angular scale ("auto": for the
        basin method :meth:`smoothing_scale`, 2 pi / L, which removes Gibbs oscillations beside jumps;
        for the level method none; None or 0: rho itself); the basin method tests the threshold on rho
        itself in each peak's core (the top 10% of the smoothed peak), so that a narrow peak the
        smoothing lowers below it is still an atom; masses are always those of rho.
        """
        c = np.asarray(c)
        L = max(sphere.degree_of(c.size), 1)
        c = sphere.resize(c, L)
        b = _basis(L) if grid is None else _basis(L, *grid)
        poles = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
        pts = np.concatenate([b.points.reshape(-1, 3), poles])

        def values(cc):
            return np.concatenate([b.synth(b.from_canonical(cc)).ravel(), sphere.evaluate(cc, poles)])
        vals = values(c)
        h = (SphereSpace.smoothing_scale(L) if method == "basin" else 0.0) if smoothing == "auto" \
            else float(smoothing or 0.0)
        shape = values(SphereSpace.heat_smooth(c, h)) if h > 0 else None
        w = np.concatenate([b.weights.ravel(), np.zeros(2)])
        edges = shared_graph(sphere.grid_neighbours(b.nlat, b.nphi, pole_nodes=True))
        return atoms_from_graph(pts, vals, w, edges, threshold=threshold, method=method, min_mass=min_mass,
                                shape=shape, prominence=prominence)

    @staticmethod
    def smoothing_scale(degree: int) -> float:
        """2 pi / L: about one wavelength of degree L, the heat-kernel scale at which Gibbs oscillations
        beside a jump are smoothed away (atoms; the continuation's density)."""
        return 2.0 * math.pi / max(int(degree), 1)

    @staticmethod
    def heat_smooth(c: np.ndarray, h: float) -> np.ndarray:
        """Coefficients smoothed by the heat kernel at angular scale h: c_lm exp(-l(l+1) h^2 / 2)."""
        ell = sphere.canonical_degrees(sphere.degree_of(np.shape(c)[-1]))[0].astype(float)
        return np.asarray(c) * np.exp(-0.5 * ell * (ell + 1.0) * h * h)

    @staticmethod
    def project(f, L: int) -> np.ndarray:
        """Canonical coefficients of degree <= L of a density given as a callable on unit vectors (n, 3).

        Sampled on a Gauss grid of about 2(L+1) x 4(L+1) nodes: the coefficients kept are exact up
        to the aliasing of degrees >= 3L.
        """
        L = int(L)
        nlat = max(2 * (L + 1), 32)
        nphi = sphere.fft_size(4 * (L + 1))
        b = _basis(L, nlat, nphi)
        vals = density_values(f, b.points.reshape(-1, 3), "initial density").reshape(b.shape)
        return b.to_canonical(b.analys(vals))

    @staticmethod
    def tail(c: np.ndarray, fraction: float = 1.0 / 3.0) -> float:
        """Relative L^2 size of the top third of the degrees (m > 0 counted twice)."""
        return sphere.spectral_tail(c, fraction)

    @staticmethod
    def l2_norm(c: np.ndarray) -> float:
        """||rho||_{L^2(sigma)}, sigma the uniform probability measure."""
        return sphere.l2_norm(c)

    @staticmethod
    def mass(c: np.ndarray) -> float:
        """∫ rho dsigma = c_00 / sqrt(4 pi)."""
        return float(np.real(np.asarray(c)[0]) / _SQRT_4PI)

    @staticmethod
    def resize(c: np.ndarray, degree: int) -> np.ndarray:
        return sphere.resize(c, degree)

    @staticmethod
    def to_state(c: np.ndarray, degree: int) -> np.ndarray:
        """Solver state (native SHTns layout) from canonical coefficients of degree <= L."""
        perm = _native_to_canonical(int(degree))
        return np.ascontiguousarray(np.asarray(c, dtype=complex)[perm])

    @staticmethod
    def to_canonical(u: np.ndarray, degree: int) -> np.ndarray:
        out = np.empty(sphere.ncoef(degree), dtype=complex)
        out[_native_to_canonical(int(degree))] = u
        return out

    # --- comparison with particles -----------------------------------------------------------------
    sigma_factor = 1.0 / (4.0 * math.pi)   # ∫ f g dsigma = sigma_factor * sum_lm mult Re(f_lm conj g_lm)

    @staticmethod
    def multiplicity(degree: int) -> np.ndarray:
        """How often each canonical coefficient counts in sums over all orders (m and -m)."""
        _, m = sphere.canonical_degrees(degree)
        return np.where(m > 0, 2.0, 1.0)

    @staticmethod
    def harmonic_degree(degree: int) -> np.ndarray:
        return sphere.canonical_degrees(degree)[0]

    @staticmethod
    def mode_coordinates(degree: int) -> dict[str, np.ndarray]:
        """The coordinates of the canonical coefficients: degree l and order m (>= 0) of c_lm."""
        l, m = sphere.canonical_degrees(degree)
        return {"l": l, "m": m}

    @staticmethod
    def particle_coefficients(x: np.ndarray, w: np.ndarray, degree: int) -> np.ndarray:
        """Canonical coefficients of mu = sum_i w_i delta_{x_i} normalised like those of a density
        w.r.t. sigma: c_lm = 4 pi sum_i w_i conj(Y_lm(x_i)) (so c_00 = sqrt(4 pi) for mass 1)."""
        return 4.0 * math.pi * sphere.point_coefficients(x, w, degree)

    @staticmethod
    def quadrature(c: np.ndarray, npoints: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (n, 3), weights (n,), rho (n,)) on the Gauss grid of the coefficients' degree."""
        L = sphere.degree_of(np.shape(c)[-1])
        b = _basis(L)
        rho = b.synth(b.from_canonical(np.asarray(c, dtype=complex)))
        return b.points.reshape(-1, 3), b.weights.reshape(-1), np.asarray(rho).reshape(-1)

    @staticmethod
    def cap_mass(c: np.ndarray, p: np.ndarray, r: float) -> np.ndarray:
        """Mass of the density within geodesic distance r of each unit vector p (k, 3), exact for the
        truncated series by Funk–Hecke: the cap indicator has multipliers lambda_l = (1/2) ∫_{cos r}^1 P_l =
        (P_{l-1}(cos r) - P_{l+1}(cos r)) / (2 (2l + 1)) (lambda_0 = (1 - cos r) / 2, the cap's share of
        sigma), so the cap mass is sum_lm lambda_l c_lm Y_lm(p)."""
        from scipy.special import eval_legendre

        p = np.asarray(p, dtype=float).reshape(-1, 3)
        if p.shape[0] == 0:
            return np.zeros(0)
        c = np.asarray(c)
        L = sphere.degree_of(c.size)
        z = math.cos(min(float(r), np.pi))
        ell = np.arange(L + 2)
        P = eval_legendre(ell, z)
        lam = np.empty(L + 1)
        lam[0] = 0.5 * (1.0 - z)
        lam[1:] = (P[:L] - P[2:L + 2]) / (2.0 * (2.0 * ell[1:L + 1] + 1.0))
        return sphere.evaluate(c * lam[SphereSpace.harmonic_degree(L)], p)

    @staticmethod
    def handoff_nodes(c: np.ndarray, degree: int, n: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        """The Gauss grid of nlat x 2 nlat nodes, about n of them (nlat even), weights rho x Gauss weight
        (``solvers.lagrangian``); negative weights clipped (their mass returned), the rest normalised.
        Returns (points (m, 3), weights (m,), clipped mass, description)."""
        L = int(degree)
        nlat = max(int(round(math.sqrt(n / 2.0))), 2)
        nlat += nlat % 2
        nphi = 2 * nlat
        x, q = sphere.gauss_nodes(nlat)
        c = sphere.resize(np.asarray(c, dtype=complex), L)
        if nlat > L and nlat >= 32:
            b = SphereBasis(L, nlat, nphi)             # the same nodes, by SHTns
            rho = b.synth(b.from_canonical(c)).ravel()
        else:
            rho = sphere.evaluate(c, x)
        mass = rho * q
        clipped = float(np.maximum(-mass, 0.0).sum())
        keep = mass > 0
        w = mass[keep]
        return (np.ascontiguousarray(x[keep]), w / w.sum(), clipped,
                f"Gauss grid {nlat} x {nphi} ({w.size} nodes with rho > 0), weights rho x Gauss weight, L = {L}")

    @staticmethod
    def probe_points(n: int) -> np.ndarray:
        """n check points (n, 3) of a Fibonacci lattice, off every Gauss sampling grid."""
        i = np.arange(n) + 0.5
        z = 1.0 - 2.0 * i / n
        phi = np.pi * (1.0 + np.sqrt(5.0)) * i + 0.318
        s = np.sqrt(1.0 - z * z)
        return np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=1)

    @staticmethod
    def output_grid_size(npoints: int) -> int:
        """Points of :meth:`output_grid` (npoints): npoints x 2 npoints."""
        return 2 * int(npoints) ** 2

    @staticmethod
    def transform_bytes(degree: int) -> float:
        """Memory of the transforms and buffers at degree L: about 0.9 GiB x ((L + 1) / 1024)^2, the
        growth of the grid fitted to the measured use at L = 511 to 2047."""
        return 0.9 * float(1 << 30) * ((int(degree) + 1) / 1024.0) ** 2

    @staticmethod
    def node_spacing(n: int) -> float:
        """Mean spacing sqrt(4 pi / n) of n nodes (radians)."""
        return math.sqrt(4.0 * math.pi / n)

    @staticmethod
    def partition(n: int) -> tuple[np.ndarray, np.ndarray]:
        """Centres (m, 3) and measures (m,) of about n equal-area cells: bands equal in z, equal longitudes."""
        nb = max(2, int(round(math.sqrt(n / 2))))
        z_edges = np.linspace(-1, 1, nb + 1)
        nphi = 2 * nb
        zc = 0.5 * (z_edges[1:] + z_edges[:-1])
        phi = 2 * np.pi * (np.arange(nphi) + 0.5) / nphi
        Z, P = np.meshgrid(zc, phi, indexing="ij")
        r = np.sqrt(1 - Z ** 2)
        pts = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3)
        return pts, np.full(pts.shape[0], 1.0 / pts.shape[0])

    @staticmethod
    def cell_index(x: np.ndarray, n: int) -> np.ndarray:
        """The cell of :meth:`partition` (n) holding each point."""
        nb = max(2, int(round(math.sqrt(n / 2))))
        nphi = 2 * nb
        b = np.minimum(((np.clip(x[:, 2], -1, 1) + 1) / 2 * nb).astype(int), nb - 1)
        ph = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
        k = np.minimum((ph / (2 * np.pi) * nphi).astype(int), nphi - 1)
        return b * nphi + k

    @staticmethod
    def degrees(degree: int) -> np.ndarray:
        """Degree l of each canonical coefficient."""
        return sphere.canonical_degrees(int(degree))[0].astype(float)


class SphereDiscretization:
    """Right-hand side and diagnostics of the PDE on S^2 at maximal degree L.

    Parameters
    ----------
    model : Model with d = 3
    L : maximal harmonic degree
    threads : OpenMP threads of the SHTns transforms
    effort : "FFTW_ESTIMATE" (deterministic SHTns initialisation, the default) or a higher planner
        effort (SHTns times its algorithm variants)
    """

    space = SphereSpace
    #: rhs_flux takes no stage in factored form: its input is converted to SHTns's layout anyway, and the
    #: spherical transforms dwarf the pass that forming the stage costs
    factored_stages = False

    def __init__(self, model: Model, L: int, *, threads: int = 1, effort: str = "FFTW_ESTIMATE") -> None:
        if model.d != 3:
            raise ValueError(f"the sphere solver needs d = 3, got d = {model.d}")
        self.model = model
        self.L = self.degree = int(L)
        self.basis = b = SphereBasis(self.L, threads=threads, effort=effort)
        self.threads, self.effort = int(threads), effort
        self.grid_shape = b.shape
        self.spacing = b.spacing
        self.l = b.l
        ll1 = (b.l * (b.l + 1)).astype(float)
        # -div(rho v) = s l(l+1) S, S the spheroidal coefficients of the flux rho w (v = s w, Model.drive: s
        # goes here, exactly). N = divergence * rhs_flux (the stepper applies it where it stores a stage:
        # IFRungeKutta's scaled). Complex, though real: numpy casts a real factor of a complex array chunk
        # by chunk
        self.divergence = (model.sign * ll1).astype(complex)
        self.lin = -model.noise * ll1 if model.noise > 0 else None
        self._g = model.energy_multipliers(self.L)
        lam = model.kernel_multipliers(self.L)
        twice = np.where(b.m > 0, 2.0, 1.0)                      # m > 0 stands for m and -m
        self._power_weight = twice / (4.0 * math.pi)             # Parseval for sigma
        # SphereSpace.tail in the native layout, over the float view of the state: the power weights of
        # every coefficient and of the tail's (l >= tail_cut) alone
        mult = np.repeat(twice, 2)
        self._tail_w = np.stack([mult, np.where(np.repeat(b.l, 2) >= sphere.tail_cut(self.L), mult, 0.0)])
        self._sq = np.empty(mult.size)

        # kernel fields: only the degrees the kernel resolves above round-off
        self.La = 0 if model.attention == "none" else min(self.L, kernel_bandwidth(model.beta, 3, _KERNEL_TOL))
        self.kbasis = None
        if self.La:
            if self.La < self.L:
                kb = SphereBasis(self.La, b.nlat, b.nphi, threads=threads, effort=effort)
                # positions in the degree-L native state of the degree-La native coefficients
                self._kidx = kb.m * (2 * self.L + 3 - kb.m) // 2 + (kb.l - kb.m)
            else:
                kb = b
                self._kidx = None
            self.kbasis = kb
            self._mult_G = self._g[kb.l].astype(complex)
            self._mult_psi = lam[kb.l].astype(complex)
            self._psi_bound = np.sqrt((2 * np.arange(self.La + 1) + 1) / (4.0 * math.pi)) * lam[: self.La + 1]
            self._kl, self._km2 = kb.l, np.where(kb.m > 0, 2.0, 1.0)
            self._kspec = np.empty(kb.nlm, dtype=complex)

        # perceptron drift sampled on the grid, on (e_theta, e_phi) — never expanded in harmonics
        pts = b.points.reshape(-1, 3)
        drift = model.drift(pts)
        if drift is None:
            self.drift = None
        else:
            drift = drift.reshape(b.nlat, b.nphi, 3)
            self.drift = np.ascontiguousarray(np.stack([np.einsum("ijk,ijk->ij", drift, b.e_theta),
                                                        np.einsum("ijk,ijk->ij", drift, b.e_phi)]))
        pot = model.perceptron is not None and model.perceptron.is_gradient
        self.V = model.potential(pts).reshape(b.shape) if pot else None
        self.w = b.weights

        # transform buffers (C-contiguous float64 (nlat, nphi) rows, as SHTns requires)
        self._rho = b.spat_array()
        self._G = b.spat_array(2)
        self._psi = b.spat_array() if (self.La and model.normalized) else None
        self._S = b.spec_array()
        self._T = b.spec_array()
        self._zero = b.spat_array(2) if not self.La else None       # G without attention
        self._v = b.spat_array(2)              # velocity()'s v; rhs_flux's |w|^2 (last stage), or w without attention
        self.last: dict = {}

    # --- right-hand side ------------------------------------------------------------------------
    def fields(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """rho, G = (G_theta, G_phi) and Psi (SA) on the grid (views into buffers: valid until the next call)."""
        b = self.basis
        u = b._spec_in(u)
        b.sht.SH_to_spat(u, self._rho)
        if not self.La:
            return self._rho, None, None
        kb = self.kbasis
        spec = self._kspec
        src = u if self._kidx is None else u[self._kidx]
        np.multiply(src, self._mult_G, out=spec)
        kb.sht.SHsph_to_spat(spec, self._G[0], self._G[1])
        psi = None
        if self._psi is not None:
            np.multiply(src, self._mult_psi, out=spec)
            kb.sht.SH_to_spat(spec, self._psi)
            psi = self._psi
        return self._rho, self._G, psi

    def velocity(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """rho, v = (v_theta, v_phi) (2, nlat, nphi) and Psi (SA only) on the grid (views into buffers:
        valid until the next call)."""
        rho, G, psi = self.fields(u)
        return rho, self.model.velocity(self._zero if G is None else G, psi, self.drift, out=self._v), psi

    def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        """-div(rho v) in native coefficients (the nonlinear part of the PDE): ``divergence`` times
        :meth:`rhs_flux` (a new array)."""
        return np.multiply(self.rhs_flux(t, u, last), self.divergence)

    def rhs_flux(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        """The spheroidal coefficients S of the flux rho w, w = s v (``Model.drive``): -div(rho v) is
        ``divergence`` (s l(l+1)) times S. A view into the transform buffer, valid until the next call.
        With ``last``, the diagnostics of the state (min/max density, max |v|) go to :attr:`last`."""
        rho, G, psi = self.fields(u)
        # w and then the flux in G's own buffer: the grid fields are ~1 MB each, and passes that write a
        # third array run at memory speed; in place they run about twice as fast
        w = self.model.drive(G, psi, self.drift, out=G) if G is not None \
            else self.model.drive(self._zero, psi, self.drift, out=self._v)
        if last:
            # |v|^2 = |w|^2 (in the scratch buffer), before the flux overwrites w
            v2 = np.square(w, out=self._v) if w is not self._v else np.square(w)
            self.last = {"min_density": float(rho.min()), "max_density": float(rho.max()),
                         "vmax": float(math.sqrt(np.add(v2[0], v2[1], out=v2[0]).max()))}
            if psi is not None:
                self.last["psi_ratio"] = self._psi_ratio(u, psi)
        flux = np.multiply(w, rho, out=w)
        self.basis.sht.spat_to_SHsphtor(flux[0], flux[1], self._S, self._T)
        return self._S

    def _psi_ratio(self, u: np.ndarray, psi: np.ndarray) -> float:
        """min Psi / (absolute sum of its series).

        Psi's round-off is eps times the sup of its terms: for degree l, |sum_m c_lm Y_lm(x)| <=
        sqrt((2l+1)/4pi) ||c_l|| by the addition theorem (attained by a zonal field at its pole), so
        the absolute sum is sum_l lambda_l sqrt((2l+1)/4pi) ||c_l||. log Psi (hence the SA velocity)
        is only as accurate as psi / that sum allows (The model §4)."""
        src = u if self._kidx is None else u[self._kidx]
        p2 = np.bincount(self._kl, weights=self._km2 * np.abs(src) ** 2, minlength=self.La + 1)
        return float(psi.min() / float(np.einsum("i,i->", self._psi_bound, np.sqrt(p2))))

    # --- diagnostics ------------------------------------------------------------------------------
    def norm(self, u: np.ndarray) -> float:
        """||rho||_{L^2(sigma)} (Parseval, m > 0 twice, over 4 pi)."""
        # native layout: the m = 0 coefficients come first (l = 0..L), so sum over m > 0 twice =
        # 2 (all) - (m = 0), two passes over float views and no temporary (2A - B >= A: no cancellation).
        # einsum rather than a BLAS dot: threaded BLAS wake-ups cost more than the sum itself
        v = np.ascontiguousarray(u, dtype=complex).view(float)
        m0 = v[: 2 * (self.L + 1)]
        return float(math.sqrt((2.0 * np.einsum("i,i->", v, v) - np.einsum("i,i->", m0, m0)) / (4.0 * math.pi)))

    def tail(self, u: np.ndarray, norm: float | None = None) -> float:
        """The spectral tail of u (``SphereSpace.tail`` of its canonical coefficients), summed in the
        native layout; ``norm`` is accepted for the interface: the total comes from the same squares."""
        sq = np.square(np.ascontiguousarray(u, dtype=complex).view(float), out=self._sq)
        total, upper = self._tail_w @ sq
        return float(math.sqrt(upper / total)) if total > 0 else 0.0

    def energy(self, u: np.ndarray) -> float:
        """E[rho] from the exact multipliers and grid quadrature of V rho.

        Pair term A = ∬ g(<x,y>) rho(x) rho(y) dsigma dsigma = ∫ rho (g * rho) dsigma with
        (g * rho)_lm = g_l c_lm (Funk–Hecke for sigma); the harmonics are orthonormal for the area
        measure 4 pi sigma, so A = sum_l g_l (|c_l0|^2 + 2 sum_{m>0} |c_lm|^2) / (4 pi).
        """
        pair = float(np.einsum("i,i->", self._power_weight * self._g[self.l], u.real ** 2 + u.imag ** 2))
        pot = 0.0
        if self.V is not None:
            rho = self.basis.synth(u)
            pot = float(np.sum(self.w * self.V * rho))
        return self.model.energy(pair, pot)

    def dissipation(self, u: np.ndarray) -> float:
        """s ∫ rho |v|^2 dsigma by Gauss quadrature: the energy rate of the noiseless USA gradient flow."""
        rho, v, _ = self.velocity(u)
        return float(self.model.sign * np.sum(self.w * rho * (v[0] ** 2 + v[1] ** 2)))

    def diagnostics(self, u: np.ndarray) -> dict:
        """min/max density, max |v| and (SA) the Psi ratio of the state u, computed afresh."""
        self.rhs(0.0, u, True)
        return dict(self.last)

    def filter_multipliers(self, filt) -> np.ndarray:
        """The explicit filter's multipliers sigma(l / L), native layout."""
        return filt.multipliers(self.l, self.L)

    def refined(self, L: int) -> "SphereDiscretization":
        return SphereDiscretization(self.model, L, threads=self.threads, effort=self.effort)
