"""The mean-field PDE on the circle S^1, discretised in Fourier space.

The model and its spectral facts: docs/model.md §1–§4; the solver's behaviour: docs/numerics.md.

State: the coefficients c_0..c_{K-1} of rho (``spectral.fourier`` conventions; c_0 = mass = 1).
Right-hand side, evaluated pseudo-spectrally on the dealiased grid of M >= 3K points:

    Psi-hat_k = lambda_k c_k,  G = d/dtheta Phi with Phi-hat_k = (lambda_k / beta) c_k  (exact multipliers)
    v = Model.velocity(G, Psi, drift)           (drift = perceptron drift sampled on the grid)
    d c_k / dt = -i k FFT(rho v)_k  - nu k^2 c_k   (the last term is treated exactly by the stepper)

The l = 0 coefficient is untouched by the divergence: mass is conserved to round-off.
"""
from __future__ import annotations

import numpy as np

from spectral import fourier
from spectral.fourier import FourierBasis
from spectral.multipliers import kernel_bandwidth
from ._compiled import kernels
from .atoms import DEFAULT_PROMINENCE, Atoms, atoms_from_graph, circle_neighbours
from .model import Model, density_values
from .spaces import MIN_DEGREE

__all__ = ["CircleDiscretization", "CircleSpace"]

# Multipliers below this fraction of the largest one are dropped: the kernel fields they would add
# are below double-precision round-off of the fields themselves.
_KERNEL_TOL = 1e-17


class CircleSpace:
    """Operations on canonical coefficients of S^1 (no transforms planned): evaluation, grids, atoms.

    Canonical layout: c_0..c_{K-1}; a representation with fewer modes is a prefix.
    """

    d = 2
    default_max_degree = 1 << 16
    default_handoff_degree = 1024       # the continuation's largest Eulerian resolution
    default_nodes = 4096                # the continuation's nodes: four per mode at the handoff degree
    basin_floor_nodes = 2               # an atom's basin is an arc: each end known to within one node
    default_particle_degree = 512       # modes of a particle measure's coefficients (comparison)
    has_cdf = True
    resolution_symbol = "K"
    default_output_points = 1024
    min_degree = MIN_DEGREE
    mass_coefficient = 1.0      # c_0 of the uniform probability density

    @staticmethod
    def ncoef(degree: int) -> int:
        return int(degree)

    @staticmethod
    def degree_of(ncoef: int) -> int:
        """The resolution (modes K) of ``ncoef`` canonical coefficients."""
        return int(ncoef)

    @staticmethod
    def degree_holding(harmonic_degree: int) -> int:
        """The resolution that holds every wavenumber <= ``harmonic_degree``: K = that + 1 modes."""
        return int(harmonic_degree) + 1

    @staticmethod
    def computational_grid(degree: int) -> tuple[int]:
        """(M,): the dealiased collocation grid of K = degree modes (``spectral.fourier.dealiased_size``),
        fixed by K alone."""
        return (fourier.dealiased_size(degree),)

    @staticmethod
    def output_grid(npoints: int) -> np.ndarray:
        th = 2.0 * np.pi * np.arange(npoints) / npoints
        return np.stack([np.cos(th), np.sin(th)], axis=-1)

    @staticmethod
    def evaluate(c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """rho at unit vectors x (n, 2) from coefficients c (direct summation, exact)."""
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[1] != 2:
            raise ValueError(f"points on S^1 must have shape (n, 2), got {x.shape}")
        theta = np.arctan2(x[:, 1], x[:, 0])
        c = np.asarray(c)
        return fourier.evaluate(c, theta)

    @staticmethod
    def on_output_grid(c: np.ndarray, npoints: int) -> np.ndarray:
        return fourier.interpolate(c, npoints)

    @staticmethod
    def atoms(c: np.ndarray, threshold: float = 10.0, method: str = "basin", min_mass: float = 0.0,
              grid_points: int | None = None, smoothing: float | str | None = "auto",
              prominence: float = DEFAULT_PROMINENCE) -> Atoms:
        """Atoms of rho from its coefficients, on a grid of >= 4 K points (see ``solvers.atoms``, where
        ``prominence`` is defined).

        ``smoothing``: the peaks and basins (for the level method the level set) are those of rho
        smoothed by the heat kernel at this angular scale ("auto": for the basin method two wavelengths
        of the highest mode, 4 pi / K, which removes the Gibbs oscillations beside a jump of a ReLU
        density; for the level method none, its level set being that of rho; None or 0: rho itself);
        the basin method tests the threshold on rho itself in each peak's core (the top 10% of the
        smoothed peak), so that a narrow peak the smoothing lowers below it is still an atom; masses
        are always those of rho.
        """
        c = np.asarray(c)
        K = c.shape[-1]
        n = grid_points or max(4 * K, 256)
        rho = fourier.interpolate(c, n)
        h = (CircleSpace.smoothing_scale(K) if method == "basin" else 0.0) if smoothing == "auto" \
            else float(smoothing or 0.0)
        shape = fourier.interpolate(CircleSpace.heat_smooth(c, h), n) if h > 0 else None
        pts = CircleSpace.output_grid(n)
        return atoms_from_graph(pts, rho, np.full(n, 1.0 / n), circle_neighbours(n),
                                threshold=threshold, method=method, min_mass=min_mass, shape=shape,
                                prominence=prominence)

    @staticmethod
    def smoothing_scale(degree: int) -> float:
        """4 pi / K: two wavelengths of the highest of K modes, the heat-kernel scale at which Gibbs
        oscillations beside a jump are smoothed away (atoms; the continuation's density)."""
        return 4.0 * np.pi / int(degree)

    @staticmethod
    def heat_smooth(c: np.ndarray, h: float) -> np.ndarray:
        """Coefficients of rho smoothed by the heat kernel at angular scale h: c_k exp(-k^2 h^2 / 2)."""
        k = np.arange(np.shape(c)[-1], dtype=float)
        return np.asarray(c) * np.exp(-0.5 * k * k * h * h)

    @staticmethod
    def project(f, K: int) -> np.ndarray:
        """Coefficients of a density given as a callable on unit vectors (n, 2), with K modes.

        Sampled on 8K points: the coefficients kept are exact up to the aliasing of modes >= 7K.
        """
        n = max(8 * K, 64)
        basis = FourierBasis(K, grid_size=n + (n % 2))
        return basis.from_grid(density_values(f, basis.points, "initial density"))

    @staticmethod
    def tail(c: np.ndarray, fraction: float = 1.0 / 3.0) -> float:
        return fourier.spectral_tail(c, fraction)

    @staticmethod
    def l2_norm(c: np.ndarray) -> float:
        return fourier.l2_norm(c)

    @staticmethod
    def mass(c: np.ndarray) -> float:
        return float(np.real(c[0]))

    @staticmethod
    def resize(c: np.ndarray, degree: int) -> np.ndarray:
        return fourier.resize(c, degree)

    @staticmethod
    def to_state(c: np.ndarray, degree: int) -> np.ndarray:
        """Solver state from canonical coefficients (on S^1 they are the same array)."""
        return np.array(c, dtype=complex)

    @staticmethod
    def to_canonical(u: np.ndarray, degree: int) -> np.ndarray:
        return np.array(u, dtype=complex)

    @staticmethod
    def degrees(degree: int) -> np.ndarray:
        """Wavenumber of each canonical coefficient."""
        return np.arange(degree, dtype=float)

    # --- comparison with particles -----------------------------------------------------------------
    sigma_factor = 1.0   # ∫ f g dsigma = sigma_factor * sum_k mult_k Re(f_k conj g_k)

    @staticmethod
    def multiplicity(degree: int) -> np.ndarray:
        """How often each canonical coefficient counts in sums over all modes (k and -k)."""
        m = np.full(degree, 2.0)
        m[0] = 1.0
        return m

    @staticmethod
    def harmonic_degree(degree: int) -> np.ndarray:
        return np.arange(degree)

    @staticmethod
    def mode_coordinates(degree: int) -> dict[str, np.ndarray]:
        """The coordinates of the canonical coefficients: the wavenumber k of c_k."""
        return {"k": np.arange(degree)}

    @staticmethod
    def particle_coefficients(x: np.ndarray, w: np.ndarray, degree: int) -> np.ndarray:
        """Canonical coefficients of mu = sum_i w_i delta_{x_i}: c_k = sum_i w_i exp(-i k theta_i)
        (``spectral.fourier.point_coefficients``)."""
        return fourier.point_coefficients(np.arctan2(x[:, 1], x[:, 0]), w, degree)

    @staticmethod
    def quadrature(c: np.ndarray, npoints: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (n, 2), weights (n,), rho (n,)) on an equispaced grid fine enough for c (n >= 4K)."""
        n = npoints or max(4 * np.shape(c)[-1], 1024)
        return CircleSpace.output_grid(n), np.full(n, 1.0 / n), fourier.interpolate(c, n)

    @staticmethod
    def cap_mass(c: np.ndarray, p: np.ndarray, r: float) -> np.ndarray:
        """Mass of the density within geodesic distance r of each unit vector p (k, 2): exact for the
        truncated series, from its CDF continued periodically."""
        p = np.asarray(p, dtype=float).reshape(-1, 2)
        if p.shape[0] == 0:
            return np.zeros(0)
        c = np.asarray(c)
        th = np.arctan2(p[:, 1], p[:, 0])
        total = float(c[0].real)

        def G(a):   # G(a + 2 pi) = G(a) + total
            n = np.floor((a + np.pi) / (2 * np.pi))
            return CircleSpace.cdf(c, a - 2 * np.pi * n) + total * n
        r = min(float(r), np.pi)
        return G(th + r) - G(th - r)

    @staticmethod
    def handoff_nodes(c: np.ndarray, degree: int, n: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        """The n equal-mass nodes of the density's CDF (``solvers.lagrangian``): the exact inverse CDF of the
        series where it is >= 0, else the CDF of max(rho, 0) tabulated on a fine grid (the clipped mass is
        returned). Returns (points (n, 2), weights (n,), clipped mass, description)."""
        c = np.asarray(c, dtype=complex)
        K = c.size
        fine = max(16 * K, 8 * n, 4096)
        rho = fourier.interpolate(c, fine)
        u = (np.arange(n) + 0.5) / n
        if rho.min() >= 0.0:
            theta = fourier.inverse_cdf(c, u)
            clipped = 0.0
            how = "exact inverse CDF of the series"
        else:
            # the CDF of max(rho, 0) by the trapezoidal rule, inverted by linear interpolation (second order
            # where rho crosses 0, as the clipping itself is)
            neg = np.minimum(rho, 0.0)
            clipped = float(-neg.mean() / c[0].real)
            pos = rho - neg
            cum = np.concatenate([[0.0], np.cumsum(0.5 * (pos + np.roll(pos, -1)))])
            cum /= cum[-1]
            theta = np.interp(u, cum, 2.0 * np.pi * np.arange(fine + 1) / fine)
            how = f"inverse CDF of max(rho, 0) tabulated on {fine} points"
        x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
        return x, np.full(n, 1.0 / n), clipped, f"{n} equal-mass nodes ({how}, {K} modes)"

    @staticmethod
    def probe_points(n: int) -> np.ndarray:
        """n check points (n, 2) at angles off every equispaced sampling grid (an irrational offset)."""
        th = 2.0 * np.pi * (np.arange(n) + 0.5 + 0.318) / n
        return np.stack([np.cos(th), np.sin(th)], axis=1)

    @staticmethod
    def output_grid_size(npoints: int) -> int:
        """Points of :meth:`output_grid` (npoints)."""
        return int(npoints)

    @staticmethod
    def transform_bytes(degree: int) -> float:
        """Memory of the transforms at resolution ``degree`` (K modes: a few arrays of 3K doubles)."""
        return 64.0 * 3 * int(degree)

    @staticmethod
    def node_spacing(n: int) -> float:
        """Mean spacing 2 pi / n of n nodes (radians)."""
        return 2.0 * np.pi / n

    @staticmethod
    def partition(n: int) -> tuple[np.ndarray, np.ndarray]:
        """Centres (n, 2) and measures (n,) of n equal arcs (cells of the concentration measures)."""
        th = -np.pi + 2 * np.pi * (np.arange(n) + 0.5) / n
        return np.stack([np.cos(th), np.sin(th)], 1), np.full(n, 1.0 / n)

    @staticmethod
    def cell_index(x: np.ndarray, n: int) -> np.ndarray:
        """The cell of :meth:`partition` (n) holding each point."""
        th = np.arctan2(x[:, 1], x[:, 0])
        return np.minimum(((th + np.pi) / (2 * np.pi) * n).astype(int), n - 1)

    @staticmethod
    def cdf(c: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """F(theta) = ∫_{-pi}^{theta} rho dsigma for theta in [-pi, pi] (exact, from the coefficients)."""
        c = np.asarray(c)
        theta = np.asarray(theta, dtype=float)
        k = np.arange(1, c.shape[-1])
        out = c[0].real * (theta + np.pi) / (2 * np.pi)
        if k.size == 0:
            return out
        ck = c[1:] / (1j * k) / np.pi          # 2 Re[...] / (2 pi)
        # F(theta) - F_0(theta) = Re sum_k ck (e^{ik theta} - e^{-ik pi})
        return out + fourier.series(ck, theta, k0=1).real - float(np.sum(ck * np.exp(-1j * k * np.pi)).real)


class CircleDiscretization:
    """Right-hand side and diagnostics of the PDE on S^1 with K modes.

    Parameters
    ----------
    model : Model with d = 2
    K : number of Fourier modes
    threads, effort : FFTW threads and planner effort
    """

    space = CircleSpace

    def __init__(self, model: Model, K: int, *, threads: int = 1, effort: str = "FFTW_ESTIMATE") -> None:
        if model.d != 2:
            raise ValueError(f"the circle solver needs d = 2, got d = {model.d}")
        self.model = model
        self.K = int(K)
        self.basis = FourierBasis(self.K, threads=threads, effort=effort)
        b = self.basis
        self.degree = self.K
        self.grid_shape = (b.M,)
        self.spacing = b.spacing
        k = b.k
        self.lin = -model.noise * k * k if model.noise > 0 else None
        # kernel fields: only the modes the kernel resolves above round-off
        self.Ka = 0 if model.attention == "none" else min(self.K, kernel_bandwidth(model.beta, 2, _KERNEL_TOL) + 1)
        g = model.energy_multipliers(self.K - 1)
        lam = model.kernel_multipliers(self.K - 1)
        self._g = g
        self._mult_G = (1j * k * g)[: self.Ka]       # c -> G = dPhi/dtheta
        self._mult_psi = lam[: self.Ka].astype(complex)
        self._div = -1j * k / b.M                    # unnormalised forward FFT -> -d/dtheta
        # the flux is formed from the unsigned velocity w (v = s w, Model.drive): s goes here, exactly.
        # N = divergence * rhs_flux (the stepper applies it when it stores a stage: IFRungeKutta's scaled)
        self.divergence = model.sign * self._div
        pts = b.points
        drift = model.drift(pts)
        self.drift = None if drift is None else np.einsum("nd,nd->n", drift, b.tangents)
        pot = model.perceptron is not None and model.perceptron.is_gradient
        self.V = model.potential(pts) if pot else None
        nrows = 1 + (self.Ka > 0) + (self.Ka > 0 and model.normalized)
        self._inv = b.plan(nrows, "backward")
        self._fwd = b.plan(1, "forward")
        # views into the transform buffers, taken once (the right-hand side runs six times a step)
        inv, fwd = self._inv, self._fwd
        # the multipliers of the inverse transform's kernel rows (G, then Psi for SA), for the compiled load
        # of its input (``kernels.load_spectrum``: row 0 of inv.spec the density, rows of ncols entries)
        self._ncols = inv.spec.shape[1]
        self._mults = np.stack([self._mult_G, self._mult_psi][: nrows - 1]) if nrows > 1 else None
        # w = gamma G + drift when the drive is affine in G (USA), formed with the flux in compiled code
        self._gain = model.drive_gain if self.Ka else None
        self._mm = np.empty(4)           # min rho, max rho, min w, max w of the last stage (affine_flux)
        self._grid_rows = [inv.grid[r] for r in range(nrows)]
        self._rho_w = inv.grid[:2]       # rho and G, which rhs_flux overwrites with w
        self._flux, self._flux_hat = fwd.grid[0], fwd.spec[0, : self.K]
        self._v = np.empty(b.M)          # the velocity of velocity(), and w without attention (rhs_flux)
        self._zero = np.zeros(b.M)       # G without attention
        self.last: dict = {}

    # --- right-hand side ------------------------------------------------------------------------
    def fields(self, c: np.ndarray, factor: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """rho, G, Psi on the grid (views into the transform buffers: valid until the next call) of the
        coefficients c, or with ``factor`` of those whose float layout (re, im interleaved) is c * factor
        (c and factor flat float arrays: a stage in factored form, see :meth:`rhs_flux`)."""
        if factor is None:
            c = np.ascontiguousarray(c, dtype=complex)
            if c.shape != (self.K,):
                raise ValueError(f"expected {self.K} coefficients, got shape {c.shape}")
        elif c.shape != (2 * self.K,):
            raise ValueError(f"expected the {2 * self.K} floats of {self.K} coefficients, got shape {c.shape}")
        # row 0 = c (times factor), the kernel rows = its head times their multipliers, zeros elsewhere (the
        # c2r transform destroyed its input): one compiled pass (``kernels.load_spectrum``)
        kernels.load_spectrum(c, factor, self._inv.spec, self._ncols, self._mults)
        self._inv.execute()
        rows = self._grid_rows
        return rows[0], (rows[1] if self.Ka else None), (rows[2] if len(rows) > 2 else None)

    def velocity(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """rho, the angular velocity v_theta and Psi (SA only) on the grid (views into buffers: valid until
        the next call)."""
        rho, G, psi = self.fields(c)
        v = self.model.velocity(self._zero if G is None else G, psi, self.drift, out=self._v)
        return rho, v, psi

    def rhs(self, t: float, c: np.ndarray, last: bool = False) -> np.ndarray:
        """-d/dtheta (rho v) in coefficient space (the nonlinear part of the PDE): ``divergence`` times
        :meth:`rhs_flux` (a new array)."""
        return np.multiply(self.rhs_flux(t, c, last), self.divergence)

    #: :meth:`rhs_flux` takes a stepper's stage in factored form (``IFRungeKutta``'s ``scaled``)
    factored_stages = True

    def rhs_flux(self, t: float, c: np.ndarray, last: bool = False, factor: np.ndarray | None = None
                 ) -> np.ndarray:
        """The unnormalised transform of the flux rho w, w = s v (``Model.drive``): -d/dtheta (rho v) is
        ``divergence`` (-i k s / M) times it. A view into the transform buffer, valid until the next call.
        With ``last``, the diagnostics of the state (min/max density, max |v|) go to :attr:`last`.
        ``factor``: the state is given in factored form, its float layout c * factor (:meth:`fields`): a
        stepper's stage i as its weighted sum c and its e^{c_i h L} (node c_i; IFRungeKutta's ``scaled``),
        multiplied here into the transform's input."""
        rho, G, psi = self.fields(c, factor)
        if self._gain is not None:
            # w = gamma G + drift (Model.drive, USA) in G's row, the flux and, for the last stage, the extremes
            # of rho and w: one compiled pass (``kernels.affine_flux``, the operations of Model.drive)
            kernels.affine_flux(rho, G, self._gain, self.drift, self._flux, self._mm if last else None)
            if last:
                rho_lo, rho_hi, w_lo, w_hi = self._mm.tolist()
                self.last = {"min_density": rho_lo, "max_density": rho_hi, "vmax": max(w_hi, -w_lo)}
            self._fwd.execute()
            return self._flux_hat
        # w in G's own row of the transform buffer (in place: no third array in cache)
        w = self.model.drive(G, psi, self.drift, out=G) if G is not None \
            else self.model.drive(self._zero, psi, self.drift, out=self._v)
        np.multiply(rho, w, out=self._flux)
        if last:
            # |v| = |w|; max |w| as max(max w, -min w): no temporary. With attention w is the row after rho's
            # in the transform buffer: both rows in one reduction each (ndarray.min/max without their wrappers)
            if G is not None:
                (rho_lo, w_lo), (rho_hi, w_hi) = np.minimum.reduce(self._rho_w, 1), \
                    np.maximum.reduce(self._rho_w, 1)
            else:
                rho_lo, rho_hi = np.minimum.reduce(rho), np.maximum.reduce(rho)
                w_lo, w_hi = np.minimum.reduce(w), np.maximum.reduce(w)
            self.last = {"min_density": float(rho_lo), "max_density": float(rho_hi),
                         "vmax": float(max(w_hi, -w_lo))}
            if psi is not None:
                # Psi's round-off is eps times its series' absolute sum: log Psi is only as accurate as
                # psi / that sum allows (The model §4)
                head = c[: self.Ka] if factor is None else \
                    (c[: 2 * self.Ka] * factor[: 2 * self.Ka]).view(complex)
                a = np.abs(self._mult_psi * head)
                self.last["psi_ratio"] = float(psi.min() / (a[0] + 2.0 * a[1:].sum()))
        self._fwd.execute()
        return self._flux_hat

    # --- diagnostics ------------------------------------------------------------------------------
    def norm(self, c: np.ndarray) -> float:
        return self.space.l2_norm(c)

    def tail(self, c: np.ndarray, norm: float | None = None) -> float:
        """The spectral tail of c; ``norm``: :meth:`norm` of c if known (one sum fewer)."""
        return fourier.spectral_tail(c, norm=norm)

    def energy(self, c: np.ndarray) -> float:
        """E[rho] from the exact multipliers (pair term, Parseval) and grid quadrature of V rho."""
        a2 = np.abs(c) ** 2
        a2[1:] *= 2.0
        pair = float(self._g @ a2)
        pot = 0.0
        if self.V is not None:
            rho = self.basis.to_grid(c)
            pot = float(np.mean(self.V * rho))
        return self.model.energy(pair, pot)

    def dissipation(self, c: np.ndarray) -> float:
        """s ∫ rho |v|^2 dsigma: the energy rate of the noiseless USA gradient flow (The model §3.3)."""
        rho, v, _ = self.velocity(c)
        return float(self.model.sign * np.mean(rho * v * v))

    def diagnostics(self, c: np.ndarray) -> dict:
        """min/max density, max |v| and (SA) the Psi ratio of the state c, computed afresh."""
        self.rhs(0.0, c, True)
        return dict(self.last)

    def filter_multipliers(self, filt) -> np.ndarray:
        """The explicit filter's multipliers sigma(k / (K - 1)) for this resolution."""
        return filt.multipliers(self.basis.k, self.K - 1)

    def refined(self, K: int) -> "CircleDiscretization":
        return CircleDiscretization(self.model, K, threads=self.basis.threads, effort=self.basis.effort)
