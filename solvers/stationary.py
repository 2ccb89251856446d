"""Stationary states of the noisy PDE (nu > 0), their branches in the noise, and the phase transitions.

:func:`stationary_state` solves for one stationary density by Newton's method (Newton–Krylov for general
states on S^2), with its free energy, its stability and the leading eigenvalues of the linearised PDE;
:func:`branch_from_uniform` follows the branch that leaves the uniform state at a mode's threshold by
pseudo-arclength continuation in the noise nu, through folds, and reads off its kind, its folds and where
it takes over from the uniform state; :func:`continue_branch` follows a branch through any state, switching
at the branch points it meets. Everything else of the model (beta, gamma, flow, perceptron) is fixed.
Only USA with a gradient-form perceptron (or none) is covered: SA and the general form have no free energy.

Notes
-----
**Free energy.** With U[rho] = gamma Phi + V, Phi = ∫ g(<x,y>) rho(y) dsigma(y), g(t) = e^{beta(t-1)}/beta
(Phi = Psi / beta, The model §2; the beta = 0 limit g(t) = t - 1), the USA velocity is v = s grad U
(s = +1 ascent, -1 descent) and the PDE reads d_t rho = div(rho grad(nu log rho - s U)). With the project's
energy E = (gamma/2) ∬ g rho rho + ∫ V rho (The model §1) the free energy

    F[rho] = nu ∫ rho log rho dsigma - s E[rho]

has the first variation nu log rho - s U (+ const), so along the PDE

    dF/dt = -∫ rho |grad(nu log rho - s U)|^2 dsigma <= 0:

F is a Lyapunov function (ascent: F = nu S - E, the noise fighting the energy the flow raises; descent:
F = nu S + E). Its critical points on probability densities are the stationary states,

    nu log rho - s U[rho] = const,   rho = exp(s (gamma Phi[rho] + V) / nu) / Z     (The model §3.5).

**The reduced equation.** Phi only has the degrees the kernel resolves: g_l <= 1e-17 g_0 beyond
La = kernel_bandwidth(beta, d, 1e-17), the degrees the PDE solvers drop too. So rho is fixed by its own
coordinates x_i = ∫ rho e_i dsigma in a real basis e_i of the degrees 1..La, orthonormal for sigma
(S^1: sqrt 2 cos k theta, sqrt 2 sin k theta; S^2: sqrt(4 pi) times the real and imaginary parts of the
harmonics, sqrt 2 more for m > 0), and the stationary equation is the fixed point

    x = T(x),   T_i(x) = ∫ e_i rho_x dsigma,   rho_x = exp(s (gamma sum_j g_j x_j e_j + V) / nu) / Z,

of n unknowns (n = La on S^1 for even states, 2 La in general; La for zonal states on S^2, (La + 1)^2 - 1
in general), whatever the resolution at which rho itself is represented. Its Jacobian is
I - (s gamma / nu) C G with C_ij = Cov_rho(e_i, e_j) and G = diag(g_j), and d T / d nu =
-(1/nu) ∫ e rho (w - <w>_rho), w the exponent. The integrals are quadratures on the grid of the degree
(the PDE's: M >= 3K points on S^1, the Gauss grid on S^2), exact for band-limited integrands.

**Stability.** Linearised about a stationary rho, the PDE is d_t delta = L delta = div(rho grad(H delta))
with H = nu / rho - s gamma G the Hessian of F: L = -A H with A = -div(rho grad .) >= 0, so L's spectrum
is real (L is similar to -A^{1/2} H A^{1/2}) and, by Sylvester's law of inertia, L has as many positive
eigenvalues as H has negative ones on mean-zero perturbations. On those, H = nu C^{-1} - s gamma G (C the
covariance operator of rho, the inverse of 1/rho there), congruent to I - (s gamma/nu) C^{1/2} G C^{1/2},
which has the inertia of the n x n matrix S = I - (s gamma / nu) G^{1/2} C G^{1/2}. The number of negative
eigenvalues of S is the state's number of unstable directions (its Morse index as a critical point of
F): computed on the branches, which need no more. Zeros come from symmetries (a rotated state is
stationary): one on S^1, two (zonal) or three on S^2 without a perceptron; they are neutral. In descent
S = I + (gamma/nu) G^{1/2} C G^{1/2} > 0: every state is stable (F is convex). The eigenvalues themselves
(:attr:`StationaryState.eigenvalues`) are those of the Jacobian of the PDE's own discretisation
(``solvers.pde_circle`` / ``pde_sphere``: the right-hand side is quadratic in the coefficients, so
(N(c + d) - N(c - d)) / 2 is its exact derivative) about the state, without the mass mode and without the
symmetry zeros.

**Thresholds.** At rho = 1, C = I and S is diagonal with entries 1 - s gamma g_l / nu: in ascent the
uniform state loses stability to the degree-l modes at nu_l = gamma g_l = gamma lambda_l / beta (The model
§3.2); :func:`branch_from_uniform` finds nu_l as the zero of that diagonal entry, computed from the
quadrature, on the uniform branch (the trivial solution x = 0).

**Branches.** Pseudo-arclength continuation of R(x, nu) = x - T(x) = 0 in X = (x, nu / nu_ref): tangent t
from the bordered system [R_X; t_old^T] t = (0, 1); predictor X + h t; corrector Newton on
{R = 0, t . (X - X_old) = h}; step doubled (x 1.5) after easy corrections, halved after hard ones or a
turn of the tangent above ~6 degrees. Without a perceptron the branch from the uniform state starts at
(0, nu_l) along the critical mode (the even cos(k theta) on S^1, the zonal Y_l0 on S^2: one-dimensional
kernels, so the branch point is simple) and is followed on both sides. Events between two points are
located by the secant method on the arclength from the first: a fold where the tangent's nu component
changes sign, a branch point where a negative eigenvalue of S's own block appears without a fold, a
symmetry-breaking bifurcation where one appears in another block (S^1: the odd functions; S^2: the orders
m >= 1), the transition where F crosses the uniform state's F_u = -s gamma g_0 / 2.

**Kind.** Near the threshold, nu - nu_l = a1 p + a2 p^2 + ... with p the mode's coefficient (canonical
layout) along the branch: fitted to the computed points of both sides (a cubic in p through the first
points of each side, at |p| up to ~1e-2). a1 != 0: transcritical (S^2, even l); a1 = 0 (a symmetry maps
p to -p: S^1, odd l on S^2): supercritical when a2 < 0 (the branch exists where the uniform state is
unstable, nu < nu_l: a continuous transition) and subcritical when a2 > 0 (it bends back into nu > nu_l
where the uniform state is still stable, folds at nu_f > nu_l and comes back stable: bistability, and a
discontinuous transition at nu_t in (nu_l, nu_f) where F of the upper branch crosses F_u). For mode 1,
a Lyapunov–Schmidt expansion of the fixed point gives a2 proportional to (d - 1) r / ((d + 2)(1 - r)) -
1 / (d + 2) with r = lambda_2 / lambda_1 = I_{d/2+1}(beta) / I_{d/2}(beta): it changes sign where
r = 1/d, Mun and Rosenzweig's beta_* (2026). The code does not use this: the kind is read from the branch.

**Perceptron.** A perceptron breaks the symmetry: the uniform state is no longer stationary and the branch
is imperfect (no bifurcation). :func:`branch_from_uniform` then follows, for mode 1, the branch of states
continued from the one near uniform at the largest noise; ``kind`` is "imperfect", ``threshold`` the
perceptron-free model's, and folds are still located (hysteresis).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from spectral import fourier, sphere
from . import validators as check
from .model import Model
from .stationary_problems import (INDEX_TOL, REPRESENTATIONS, _check_model, _CircleProblem, _Eval,
                                  _is_even_potential, _is_zonal_potential, _newton, _one_blas_thread, _problem,
                                  _Problem, _sphere_amplitude)

__all__ = ["StationaryState", "stationary_state", "free_energy"]


# --- the stationary state -------------------------------------------------------------------------------
@dataclass
class StationaryState:
    """A stationary state of the noisy PDE (module Notes).

    Attributes
    ----------
    model : Model
        The model; ``model.noise`` is the state's nu.
    degree : int
        Resolution of ``coeffs`` (Fourier modes K on S^1, harmonic degree L on S^2).
    coeffs : ndarray
        Canonical coefficients of rho (``solvers.spaces`` conventions; mass 1).
    grid, density : ndarray
        Output grid (unit vectors: S^1 (n, 2), S^2 (n, 2n, 3)) and rho on it (w.r.t. sigma).
    free_energy : float
        F = nu ∫ rho log rho dsigma - s E[rho] (dimensionless, like E).
    residual : float
        max over the quadrature nodes of |rho - exp(s U[rho] / nu) / Z| / max rho for the rho of ``coeffs``:
        the fixed point's miss, truncation to ``degree`` included.
    stable : bool
        No unstable direction: S (module Notes) has no eigenvalue below -1e-11, and so the linearised PDE has
        no positive eigenvalue, the symmetry zeros aside.
    unstable_directions : int
        The number of negative eigenvalues of S with their multiplicities: the positive eigenvalues of the
        linearised PDE (its Morse index as a critical point of F).
    eigenvalues : ndarray
        The leading eigenvalues (largest first; positive = unstable; units 1/time) of the linearised PDE in
        its spectral discretisation at ``degree``, without the mass mode and the symmetry zeros (real: the
        linearisation of a gradient flow; the discretisation's imaginary parts are below ``eigen_imag``).
    symmetry_modes : int
        The zero eigenvalues removed (rotations of a state without perceptron); ``symmetry_residual`` their
        largest |value| as computed.
    representation : str
        "even" / "full" (S^1), "zonal" / "general" (S^2): the unknowns the equation was solved in.
    unknowns : ndarray
        The reduced unknowns x (module Notes).
    tail : float
        Spectral tail of ``coeffs`` (relative L^2 size of the top third): the resolution's margin.
    converged : bool, iterations : int, message : str
    """

    model: Model
    degree: int
    coeffs: np.ndarray
    grid: np.ndarray
    density: np.ndarray
    free_energy: float
    residual: float
    stable: bool
    unstable_directions: int
    eigenvalues: np.ndarray
    symmetry_modes: int
    symmetry_residual: float
    eigen_imag: float
    representation: str
    unknowns: np.ndarray
    tail: float
    converged: bool
    iterations: int
    message: str
    wall_time: float = 0.0

    @property
    def noise(self) -> float:
        return self.model.noise

    @property
    def space(self):
        from .pde_spec import space_for
        return space_for(self.model.d)[1]

    def at(self, x: np.ndarray) -> np.ndarray:
        """rho at unit vectors x (n, d) from the coefficients (exact summation)."""
        return self.space.evaluate(self.coeffs, x)

    def amplitude(self, mode: int) -> float:
        """|c_k| on S^1; sqrt(sum_m mult |c_lm|^2) on S^2 (canonical coefficients)."""
        if self.model.d == 2:
            return _CircleProblem.amplitude(self.coeffs, mode)
        return _sphere_amplitude(self.coeffs, mode)

    def summary(self) -> str:
        eig = ", ".join(f"{v:+.4g}" for v in self.eigenvalues[:4])
        return (f"stationary state on S^{self.model.d - 1}, nu = {self.noise:g} ({self.representation}, degree "
                f"{self.degree}): {'stable' if self.stable else f'unstable ({self.unstable_directions} directions)'}; "
                f"free energy {self.free_energy:.12g}; residual {self.residual:.1e}; tail {self.tail:.1e}; "
                f"leading eigenvalues {eig}" + (f" (+{self.symmetry_modes} symmetry zeros)" if self.symmetry_modes
                                                  else "") + f"; {self.message}")


def _auto_representation(model: Model, c: np.ndarray | None) -> str:
    if model.d == 2:
        even = _is_even_potential(model) and (c is None or np.max(np.abs(np.imag(c))) <= 1e-12 * np.max(np.abs(c)))
        return "even" if even else "full"
    if not _is_zonal_potential(model):
        return "general"
    if c is None:
        return "zonal"
    _, m = sphere.canonical_degrees(sphere.degree_of(len(c)))
    return "zonal" if np.max(np.abs(c[m > 0]), initial=0.0) <= 1e-12 * np.max(np.abs(c)) else "general"


def _guess_coefficients(model: Model, degree: int, guess) -> np.ndarray | None:
    from .pde_spec import space_for
    space = space_for(model.d)[1]
    if guess is None or (isinstance(guess, str) and guess == "uniform"):
        return None
    if isinstance(guess, StationaryState):
        c = guess.coeffs
    elif callable(guess):
        c = space.project(guess, degree)
    else:
        c = np.asarray(guess, dtype=complex)
        if c.ndim != 1:
            raise ValueError(f"guess: coefficients must be a 1-D canonical array, got shape {c.shape}")
    c = space.resize(np.asarray(c, dtype=complex), degree)
    mass = space.mass(c)
    if not (np.isfinite(mass) and mass > 0):
        raise ValueError(f"guess: the density must have a positive mass, got {mass!r}")
    return c / mass


@_one_blas_thread
def stationary_state(model: Model, degree: int, guess=None, *, representation: str = "auto",
                     tol: float = 1e-12, max_iter: int = 50, eigenvalues: int = 8,
                     output_points: int | None = None) -> StationaryState:
    """A stationary state of the noisy PDE: rho = exp(s (gamma Phi[rho] + V) / nu) / Z (The model §3.5) by
    Newton's method on its reduced form (module Notes), with its free energy, stability and leading
    eigenvalues.

    Parameters
    ----------
    model : Model
        d = 2 or 3, USA, a gradient-form perceptron or none, noise nu = ``model.noise`` > 0.
    degree : int
        Resolution of rho (Fourier modes K on S^1, harmonic degree L on S^2), >= 4; the quadrature is on the
        PDE's grid of that degree.
    guess : None, "uniform", StationaryState, callable or coefficients
        Newton's start: the uniform density (default), another state (e.g. of another nu), a density as a
        callable on unit vectors (n, d), or canonical coefficients. Newton converges to the stationary
        state whose basin holds it: a clustered state needs a clustered guess.
    representation : {"auto", "even", "full", "zonal", "general"}
        The unknowns. "auto": on S^1 "even" (cosines: states symmetric under theta -> -theta) when the
        potential and the guess are, else "full"; on S^2 "zonal" when they are symmetric about e_z, else
        "general" (Newton–Krylov above 400 unknowns).
    tol : float
        Newton stops when max |x - T(x)| <= tol (coefficient units).
    max_iter : int
        Newton steps at most.
    eigenvalues : int
        How many leading eigenvalues of the linearised PDE to compute (0: none; the stability is then
        from S alone). They come from the dense Jacobian of the PDE's discretisation: (2K - 2)^2 on S^1,
        ((L + 1)^2 - 1)^2 for a general state on S^2 (blocks of one order m for a zonal one).
    output_points : int, optional
        Output grid of ``density`` (default the PDE's: 1024 points on S^1, 96 latitudes on S^2).

    Returns
    -------
    StationaryState
        ``converged`` says whether Newton met ``tol``; a state that did not is returned with its message.
    """
    wall0 = time.perf_counter()
    _check_model(model, "stationary_state")
    if not (model.noise > 0):
        raise ValueError("stationary_state: needs noise > 0 (without noise stationary states are atomic, The model "
                         "§4: the PDE's Lagrangian continuation finds them)")
    check.integer("degree", degree, ge=4)
    check.number("tol", tol, gt=0)
    check.integer("max_iter", max_iter, ge=1)
    check.integer("eigenvalues", eigenvalues, ge=0)
    check.choice("representation", representation, REPRESENTATIONS)
    c0 = _guess_coefficients(model, degree, guess)
    rep = _auto_representation(model, c0) if representation == "auto" else representation
    p = _problem(model, degree, rep)
    x0 = np.zeros(p.n) if c0 is None else p.from_coefficients(c0)
    ev, iters, ok, msg = _newton(p, x0, model.noise, tol, max_iter)
    return _state(p, ev, iters, ok, msg, eigenvalues, output_points, wall0)


def _state(p: _Problem, ev: _Eval, iters: int, ok: bool, msg: str, n_eig: int, output_points: int | None,
           wall0: float) -> StationaryState:
    from .pde_spec import space_for
    model = p.model.replace(noise=ev.nu)
    space = space_for(model.d)[1]
    c = p.coefficients(ev)
    # the fixed point's miss for the rho of c: its own low coordinates give U, hence exp(s U / nu) / Z
    rho_c = p.grid_values(c)
    back = p.evaluate(ev.T, ev.nu).rho
    residual = float(np.max(np.abs(rho_c - back)) / np.max(rho_c))
    spectra = p.spectra(ev)
    index = sum(mult * int(np.sum(vals < -INDEX_TOL)) for vals, mult in spectra.values())
    eig, n_sym, sym_res, imag = np.zeros(0), 0, 0.0, 0.0
    if n_eig:
        eig, n_sym, sym_res, imag = _pde_eigenvalues(model, p.degree, c, p.representation == "zonal", n_eig)
    npts = output_points or space.default_output_points
    return StationaryState(model=model, degree=p.degree, coeffs=c, grid=space.output_grid(npts),
                           density=space.on_output_grid(c, npts), free_energy=p.free_energy(ev), residual=residual,
                           stable=index == 0, unstable_directions=index, eigenvalues=eig, symmetry_modes=n_sym,
                           symmetry_residual=sym_res, eigen_imag=imag, representation=p.representation,
                           unknowns=np.array(ev.x), tail=float(space.tail(c)), converged=ok, iterations=iters,
                           message=msg, wall_time=time.perf_counter() - wall0)


# --- eigenvalues of the linearised PDE ------------------------------------------------------------------
def _pde_eigenvalues(model: Model, degree: int, c: np.ndarray, zonal: bool, count: int
                     ) -> tuple[np.ndarray, int, float, float]:
    """The leading eigenvalues of the Jacobian of the PDE's discretisation at the state c (module Notes):
    (eigenvalues largest first, symmetry zeros removed, their largest |value|, largest |imag|)."""
    from .pde_spec import space_for
    Disc, space = space_for(model.d)
    disc = Disc(model, degree)
    u = space.to_state(c, degree)
    lin = disc.lin

    def J(delta: np.ndarray) -> np.ndarray:
        # the right-hand side is quadratic in the state: the central difference is its exact derivative
        return 0.5 * (disc.rhs(0.0, u + delta) - disc.rhs(0.0, u - delta)) + lin * delta

    uniform = space.l2_norm(c - space.resize(np.array([space.mass_coefficient]), degree)) <= 1e-10
    n_sym = 0 if model.perceptron is not None or uniform else None
    groups = []                                   # (eigenvalues, multiplicity)
    if model.d == 2:
        cols = []                                 # the real parts of c_1..c_{K-1}, then their imaginary parts
        for unit in (1.0, 1j):
            for k in range(1, degree):
                d = np.zeros(degree, dtype=complex)
                d[k] = unit
                col = J(d)[1:]
                cols.append(np.concatenate([col.real, col.imag]))
        groups.append((np.linalg.eigvals(np.array(cols).T), 1))
        if n_sym is None:
            n_sym = 1
    else:
        b = disc.basis
        if zonal:
            for m in range(0, degree + 1):
                sel = np.nonzero((b.m == m) & (b.l >= max(m, 1)))[0]
                cols = []
                for i in sel:
                    d = np.zeros(b.nlm, dtype=complex)
                    d[i] = 1.0
                    cols.append(J(d)[sel].real)
                groups.append((np.linalg.eigvals(np.array(cols).T), 1 if m == 0 else 2))
            if n_sym is None:
                n_sym = 2
        else:
            sel = np.nonzero(b.l >= 1)[0]
            im = sel[b.m[sel] > 0]
            cols = []                             # the real parts (l >= 1), then the imaginary parts (m > 0)
            for unit, where in ((1.0, sel), (1j, im)):
                for i in where:
                    d = np.zeros(b.nlm, dtype=complex)
                    d[i] = unit
                    col = J(d)
                    cols.append(np.concatenate([col[sel].real, col[im].imag]))
            groups.append((np.linalg.eigvals(np.array(cols).T), 1))
            if n_sym is None:
                n_sym = _sphere_symmetry_rank(b, u)
    vals = np.concatenate([np.repeat(v, m) for v, m in groups])
    removed = 0.0
    if n_sym:
        # the symmetry zeros: the n_sym eigenvalues nearest 0 (a zonal state's pair comes from one m = 1 block)
        order = np.argsort(np.abs(vals))
        removed = float(np.max(np.abs(vals[order[:n_sym]])))
        vals = np.delete(vals, order[:n_sym])
    imag = float(np.max(np.abs(vals.imag), initial=0.0))
    vals = np.sort(vals.real)[::-1]
    return vals[:count], int(n_sym), removed, imag


def _sphere_symmetry_rank(b, u: np.ndarray) -> int:
    """How many independent infinitesimal rotations move the state (3 in general, 2 for a state symmetric
    about an axis, 0 for the uniform one): the rank of -omega . grad rho over the three axes."""
    vt, vp = b.synth_grad(u)
    pts, et, ep = b.points, b.e_theta, b.e_phi
    vecs = []
    for a in np.eye(3):
        om = np.cross(a, pts)
        f = -(np.einsum("ijk,ijk->ij", om, et) * vt + np.einsum("ijk,ijk->ij", om, ep) * vp)
        vecs.append(b.analys(np.ascontiguousarray(f)).view(float))
    sv = np.linalg.svd(np.array(vecs), compute_uv=False)
    return int(np.sum(sv > 1e-8 * max(float(np.linalg.norm(u[1:])), 1e-300)))


# --- free energy of any density ------------------------------------------------------------------------
@_one_blas_thread
def free_energy(model: Model, coeffs: np.ndarray) -> float:
    """F[rho] = nu ∫ rho log rho dsigma - s E[rho] of the density with canonical coefficients ``coeffs``
    (module Notes), nu = ``model.noise``: the pair term from the kernel's multipliers (Parseval), the entropy
    and the potential by quadrature on the PDE's grid of the coefficients' resolution. The density must be
    positive on that grid."""
    from .pde_spec import space_for
    _check_model(model, "free_energy")
    space = space_for(model.d)[1]
    c = np.asarray(coeffs, dtype=complex)
    degree = space.degree_of(c.size)
    if model.d == 2:
        M = fourier.dealiased_size(degree)
        rho = fourier.interpolate(c, M)
        theta = 2.0 * np.pi * np.arange(M) / M
        pts, w = np.stack([np.cos(theta), np.sin(theta)], axis=1), np.full(M, 1.0 / M)
    else:
        pts, w, rho = space.quadrature(c)
    if np.min(rho) <= 0:
        raise ValueError(f"free_energy: the density is not positive on the quadrature grid (min {np.min(rho):.3g})")
    g = model.energy_multipliers(int(np.max(space.harmonic_degree(degree))))
    degrees = space.harmonic_degree(degree)
    pair = space.sigma_factor * float(np.sum(space.multiplicity(degree) * g[degrees] * np.abs(c) ** 2))
    pot = float(w @ (model.potential(pts) * rho)) if model.perceptron is not None else 0.0
    entropy = float(w @ (rho * np.log(rho)))
    return model.noise * entropy - model.sign * model.energy(pair, pot)
