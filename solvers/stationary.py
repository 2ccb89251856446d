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

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh, gmres

from spectral import fourier, sphere
from spectral.multipliers import kernel_bandwidth
from . import validators as check
from ._blas import blas_threads
from .model import Model

__all__ = ["StationaryState", "Branch", "BranchSetup", "ContinuationOptions", "stationary_state", "branch_from_uniform",
           "branch_degrees", "refinement_lines", "BRANCH_DEGREE", "BRANCH_MAX_DEGREE",
           "prepare_branch", "continue_branch", "free_energy", "REPRESENTATIONS"]

#: kernel multipliers below this fraction of the largest are dropped (as the PDE solvers do)
KERNEL_TOL = 1e-17
#: representations of a state: S^1 "even" (cosines only: states symmetric under theta -> -theta) or "full";
#: S^2 "zonal" (axisymmetric about e_z) or "general"
REPRESENTATIONS = ("auto", "even", "full", "zonal", "general")
#: an eigenvalue of S below -this counts as an unstable direction (the symmetry zeros sit at ~1e-14; the
#: weakest physical ones, two clusters at beta = 30 drifting apart, at ~-5e-10)
INDEX_TOL = 1e-11
#: unknowns above which a general state on S^2 is solved by Newton–Krylov rather than with a dense Jacobian
DENSE_MAX = 400
#: a branch's resolution: where it starts (Fourier modes K on S^1, degree L on S^2) and the most it is raised to
#: when its states sharpen (ContinuationOptions.max_degree), by manifold (d)
BRANCH_DEGREE = {2: 64, 3: 32}
BRANCH_MAX_DEGREE = {2: 256, 3: 128}
_SQRT_4PI = math.sqrt(4.0 * math.pi)


def _one_blas_thread(function):
    """Run ``function`` with one OpenBLAS thread: its matrices are small (tens to hundreds of unknowns), and a
    second BLAS thread waiting for a busy core costs a product hundreds of times its work (``solvers._blas``)."""
    import functools

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with blas_threads(1):
            return function(*args, **kwargs)
    return wrapped


def _check_model(model: Model, where: str) -> None:
    if not isinstance(model, Model):
        raise TypeError(f"{where}: model must be a solvers.Model, got {type(model).__name__}")
    if model.d not in (2, 3):
        raise ValueError(f"{where}: stationary states are computed on the circle (d = 2) and the sphere (d = 3), "
                         f"got d = {model.d}")
    if model.attention != "unnormalized":
        raise ValueError(f"{where}: needs attention='unnormalized' (USA), whose stationary states are "
                         f"rho ∝ exp(s (gamma Psi / beta + V) / nu) (The model §3.5); got {model.attention!r}")
    if model.perceptron is not None and not model.perceptron.is_gradient:
        raise ValueError(f"{where}: a general-form perceptron has no potential V, hence no free energy and no "
                         "stationary-state equation: use the gradient form")


def _min_degree(d: int, mode: int) -> int:
    """The smallest resolution that represents degree ``mode`` (K = mode + 1 modes on S^1, L = mode on S^2),
    and at least 4 (the PDE's smallest)."""
    return max(4, mode + 1 if d == 2 else mode)


# --- the reduced problem ------------------------------------------------------------------------------------
@dataclass
class _Eval:
    """One evaluation of the fixed-point map at (x, nu): rho on the quadrature nodes (mass 1), its exponent
    w - max w, log Z (so that log rho = expo - logZ), quadrature weights times rho, and T(x)."""

    x: np.ndarray
    nu: float
    rho: np.ndarray
    expo: np.ndarray
    logZ: float
    wr: np.ndarray
    T: np.ndarray


def _exp(expo: np.ndarray) -> np.ndarray:
    """exp of an exponent <= 0, values below 1e-250 set to 0: subnormal numbers in the quadratures (rho of a
    concentrated state far from its peak, ~e^{-700}) slow BLAS down a hundredfold, for terms below round-off."""
    r = np.exp(np.maximum(expo, -600.0))
    r[expo < -575.0] = 0.0
    return r


class _Problem:
    """The fixed point x = T(x) of one representation (module Notes). Subclasses provide the basis on the
    quadrature nodes (:class:`_Dense`) or its transforms (:class:`_Krylov`)."""

    dense = True
    representation = ""

    def __init__(self, model: Model, degree: int, La: int) -> None:
        self.model, self.degree, self.La = model, int(degree), int(La)
        self.s = model.sign
        self.gamma = model.strength
        g_all = model.energy_multipliers(max(self.La, 1))
        self.g0 = float(g_all[0])
        self._g_all = g_all

    # to be set by subclasses: n, g (n,) multipliers per unknown, V on the nodes or None, wq weights
    def mode_index(self, mode: int) -> int:
        raise NotImplementedError

    def residual(self, ev: _Eval) -> np.ndarray:
        return ev.x - ev.T

    def _gibbs(self, phi: np.ndarray, nu: float) -> tuple[np.ndarray, np.ndarray, float]:
        """rho = exp(s (phi + V) / nu) / Z on the quadrature nodes, with its exponent shifted to a maximum of
        0 and log Z of the shifted exponent."""
        if self.V is not None:
            phi = phi + self.V
        expo = (self.s / nu) * phi
        expo -= expo.max()
        r = _exp(expo)
        Z = float(self.wq @ r)
        return r / Z, expo, math.log(Z)

    def free_energy(self, ev: _Eval) -> float:
        """F = nu ∫ rho log rho - s E[rho] (module Notes), the pair term sum_l g_l |rho_l|^2 in orthonormal
        coordinates (rho_0 = 1), the entropy from log rho = expo - log Z (no log of a small number)."""
        entropy = float(ev.wr @ ev.expo) - ev.logZ
        pair = self.g0 + float(self.g @ (ev.T * ev.T))
        pot = float(ev.wr @ self.V) if self.V is not None else 0.0
        return ev.nu * entropy - self.s * self.model.energy(pair, pot)

    def uniform_free_energy(self) -> float | None:
        """F of rho = 1 when it is stationary (no perceptron): -s gamma g_0 / 2."""
        return None if self.V is not None else -self.s * self.model.energy(self.g0, 0.0)


class _Dense(_Problem):
    """A representation whose basis is tabulated on the quadrature nodes: E (q, n), weights wq (q,) summing
    to 1; ``blocks``: the other invariant subspaces for the stability (name, E_b, g_b, multiplicity)."""

    centred_blocks = True

    def _setup(self, E: np.ndarray, wq: np.ndarray, g: np.ndarray, V: np.ndarray | None, blocks: list) -> None:
        self.E, self.wq, self.g, self.V = E, wq, g, V
        self.n = E.shape[1]
        self.gg = self.gamma * g
        self.blocks = blocks

    def evaluate(self, x: np.ndarray, nu: float) -> _Eval:
        rho, expo, logZ = self._gibbs(self.E @ (self.gg * x), nu)
        wr = self.wq * rho
        return _Eval(x=x, nu=nu, rho=rho, expo=expo, logZ=logZ, wr=wr, T=self.E.T @ wr)

    def covariance(self, ev: _Eval, E: np.ndarray | None = None, centred: bool = True) -> np.ndarray:
        """Cov_rho(e_i, e_j) of the columns of E (default the unknowns' basis); ``centred=False`` for a block
        whose functions have mean 0 under rho by symmetry but not as tabulated (S^2 orders m >= 1: the
        nodes carry P_l^m(cos theta) only, the factor cos(m phi) averaging to 0)."""
        E = self.E if E is None else E
        C = (E.T * ev.wr) @ E
        if centred:
            m = E.T @ ev.wr
            C -= np.outer(m, m)
        return C

    def jacobian(self, ev: _Eval) -> np.ndarray:
        J = -(self.s / ev.nu) * self.covariance(ev) * self.gg[None, :]
        J[np.diag_indices_from(J)] += 1.0
        return J

    def d_nu(self, ev: _Eval) -> np.ndarray:
        """dR/dnu = -dT/dnu = (1/nu) ∫ e rho (w - <w>_rho)."""
        c = ev.expo - float(ev.wr @ ev.expo)
        return (self.E.T @ (ev.wr * c)) / ev.nu

    def solve(self, ev: _Eval, rhs: np.ndarray) -> np.ndarray:
        """A least-squares Newton step: J singular along a symmetry (a rotated state) is solved in the
        minimum norm."""
        return np.linalg.lstsq(self.jacobian(ev), rhs, rcond=1e-13)[0]

    def bordered(self, ev: _Eval, nu_ref: float, t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        A = np.empty((self.n + 1, self.n + 1))
        A[: self.n, : self.n] = self.jacobian(ev)
        A[: self.n, self.n] = nu_ref * self.d_nu(ev)
        A[self.n] = t
        return np.linalg.solve(A, rhs)

    def _S(self, ev: _Eval, E: np.ndarray, g: np.ndarray, centred: bool = True) -> np.ndarray:
        r = np.sqrt(self.gamma * g)
        S = -(self.s / ev.nu) * (r[:, None] * self.covariance(ev, E, centred) * r[None, :])
        S[np.diag_indices_from(S)] += 1.0
        return S

    def spectra(self, ev: _Eval) -> dict:
        """Eigenvalues (ascending) of S in each invariant block: {name: (eigenvalues, multiplicity)}."""
        out = {"main": (scipy.linalg.eigvalsh(self._S(ev, self.E, self.g)), 1)}
        for name, Eb, gb, mult in self.blocks:
            out[name] = (scipy.linalg.eigvalsh(self._S(ev, Eb, gb, self.centred_blocks)), mult)
        return out


class _CircleProblem(_Dense):
    """S^1: x = sqrt 2 (Re c_k [, Im c_k]), k = 1..La (``even``: cosines only, the odd block for stability)."""

    def __init__(self, model: Model, K: int, even: bool) -> None:
        La = min(K - 1, kernel_bandwidth(model.beta, 2, KERNEL_TOL))
        super().__init__(model, K, La)
        self.representation = "even" if even else "full"
        self.M = fourier.dealiased_size(K)
        theta = 2.0 * np.pi * np.arange(self.M) / self.M
        self.points = np.stack([np.cos(theta), np.sin(theta)], axis=1)
        k = np.arange(1, La + 1)
        cos = math.sqrt(2.0) * np.cos(np.outer(theta, k))
        sin = math.sqrt(2.0) * np.sin(np.outer(theta, k))
        g = self._g_all[1:La + 1]
        V = model.potential(self.points) if model.perceptron is not None else None
        wq = np.full(self.M, 1.0 / self.M)
        if even:
            self._setup(cos, wq, g.copy(), V, [("odd", sin, g.copy(), 1)])
        else:
            self._setup(np.concatenate([cos, sin], axis=1), wq, np.concatenate([g, g]), V, [])

    def mode_index(self, mode: int) -> int:
        return mode - 1

    def from_coefficients(self, c: np.ndarray) -> np.ndarray:
        # c_k = ∫ rho e^{-ik theta} dsigma = (x_cos - i x_sin) / sqrt 2
        c = fourier.resize(np.asarray(c, dtype=complex) / np.real(c[0]), self.La + 1)[1:]
        return math.sqrt(2.0) * np.concatenate([c.real, -c.imag if self.representation == "full" else []])

    def coefficients(self, ev: _Eval) -> np.ndarray:
        return np.fft.rfft(ev.rho)[: self.degree] / self.M

    def grid_values(self, c: np.ndarray) -> np.ndarray:
        spec = np.zeros(self.M // 2 + 1, dtype=complex)
        spec[: len(c)] = c
        return np.fft.irfft(spec, n=self.M) * self.M

    def projection(self, c: np.ndarray, mode: int) -> float:
        return float(np.real(c[mode]))

    @staticmethod
    def amplitude(c: np.ndarray, mode: int) -> float:
        return float(abs(c[mode]))


class _ZonalProblem(_Dense):
    """S^2, axisymmetric about e_z: x_l = sqrt(2l + 1) ∫ rho P_l dsigma, l = 1..La, on Gauss–Legendre nodes in
    cos(theta); the orders m = 1..La are the stability blocks (each twice: cos and sin m phi)."""

    representation = "zonal"
    centred_blocks = False

    def __init__(self, model: Model, L: int) -> None:
        La = min(L, kernel_bandwidth(model.beta, 3, KERNEL_TOL))
        super().__init__(model, L, La)
        nlat = sphere.dealiased_grid(L)[0]
        z, wz = np.polynomial.legendre.leggauss(nlat)
        self.z = z
        s = np.sqrt(1.0 - z * z)
        self.points = np.stack([s, np.zeros_like(z), z], axis=1)
        V = None
        if model.perceptron is not None:
            V = model.potential(self.points)
            if not _is_zonal_potential(model):
                raise ValueError("representation 'zonal' needs a potential symmetric about e_z (every perceptron "
                                 "direction along e_z): use representation='general'")
        P = sphere.legendre_table(max(L, La), z)                 # [l, m, i], area-orthonormal
        self.E_full = (_SQRT_4PI * P[: L + 1, 0]).T              # sqrt(2l+1) P_l(z), l = 0..L
        g = self._g_all
        blocks = [(f"m={m}", (_SQRT_4PI * P[m:La + 1, m]).T, g[m:La + 1].copy(), 2) for m in range(1, La + 1)]
        self._setup(self.E_full[:, 1:La + 1].copy(), wz / 2.0, g[1:La + 1].copy(), V, blocks)

    def mode_index(self, mode: int) -> int:
        return mode - 1

    def from_coefficients(self, c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=complex)
        L = sphere.degree_of(c.size)
        idx = [l * (l + 1) // 2 for l in range(1, self.La + 1)]
        x = np.zeros(self.La)
        top = min(L, self.La)
        x[:top] = np.real(c[idx[:top]]) / np.real(c[0])
        return x

    def coefficients(self, ev: _Eval) -> np.ndarray:
        xf = self.E_full.T @ ev.wr
        c = np.zeros(sphere.ncoef(self.degree), dtype=complex)
        l = np.arange(self.degree + 1)
        c[l * (l + 1) // 2] = _SQRT_4PI * xf
        return c

    def grid_values(self, c: np.ndarray) -> np.ndarray:
        l = np.arange(self.degree + 1)
        return self.E_full @ (np.real(np.asarray(c)[l * (l + 1) // 2]) / _SQRT_4PI)

    @staticmethod
    def projection(c: np.ndarray, mode: int) -> float:
        return float(np.real(c[mode * (mode + 1) // 2]))

    @staticmethod
    def amplitude(c: np.ndarray, mode: int) -> float:
        return _sphere_amplitude(c, mode)


def _sphere_amplitude(c: np.ndarray, l: int) -> float:
    """sqrt(sum_m mult |c_lm|^2), canonical layout: the rotation-invariant size of degree l's coefficients
    (|c_l0| for a zonal state)."""
    c = np.asarray(c)
    seg = c[l * (l + 1) // 2: (l + 1) * (l + 2) // 2]
    return float(math.sqrt(abs(seg[0]) ** 2 + 2.0 * float(np.sum(np.abs(seg[1:]) ** 2))))


def _is_zonal_potential(model: Model) -> bool:
    p = model.perceptron
    return p is None or bool(np.all(np.abs(np.asarray(p.to_dict()["a"])[:, :2]) <= 1e-14))


class _Krylov(_Problem):
    """S^2, general states: x the sigma-orthonormal coordinates of the native coefficients of degree 1..La
    (m = 0: Re c / sqrt(4 pi); m > 0: sqrt 2 (Re c, Im c) / sqrt(4 pi)), with SHTns transforms on the Gauss
    grid of the degree; the Jacobian as an operator (GMRES), or as a matrix (columns by the operator) when
    n <= :data:`DENSE_MAX`."""

    representation = "general"

    def __init__(self, model: Model, L: int) -> None:
        La = min(L, kernel_bandwidth(model.beta, 3, KERNEL_TOL))
        super().__init__(model, L, La)
        nlat, nphi = sphere.dealiased_grid(L)
        self.basis = sphere.SphereBasis(L, nlat, nphi)
        self.kbasis = sphere.SphereBasis(max(La, 1), nlat, nphi) if La < L else self.basis
        kb = self.kbasis
        self.points = self.basis.points.reshape(-1, 3)
        self.wq = self.basis.weights.ravel()
        self.V = model.potential(self.points) if model.perceptron is not None else None
        keep = kb.l >= 1
        self._keep = np.nonzero(keep)[0]
        m = kb.m[keep]
        self._has_im = m > 0
        scale = np.where(m > 0, math.sqrt(2.0), 1.0) / _SQRT_4PI
        self._scale_re, self._scale_im = scale, scale[m > 0]
        gk = self._g_all[kb.l[keep]]
        self.g = np.concatenate([gk, gk[m > 0]])
        self.gg = self.gamma * self.g
        self.n = self.g.size
        self.dense = self.n <= DENSE_MAX
        self._lm = (kb.l[keep], m)

    def to_native(self, x: np.ndarray) -> np.ndarray:
        kb = self.kbasis
        c = np.zeros(kb.nlm, dtype=complex)
        nr = self._keep.size
        c.real[self._keep] = x[:nr] / self._scale_re
        c.imag[self._keep[self._has_im]] = x[nr:] / self._scale_im
        return c

    def from_native(self, c: np.ndarray) -> np.ndarray:
        ck = c[self._keep]
        return np.concatenate([ck.real * self._scale_re, ck.imag[self._has_im] * self._scale_im])

    def mode_index(self, mode: int) -> int:
        l, m = self._lm
        return int(np.nonzero((l == mode) & (m == 0))[0][0])

    def evaluate(self, x: np.ndarray, nu: float) -> _Eval:
        kb = self.kbasis
        rho, expo, logZ = self._gibbs(kb.synth(self.to_native(self.gg * x)).ravel(), nu)
        T = self.from_native(kb.analys(rho.reshape(kb.shape)))
        return _Eval(x=x, nu=nu, rho=rho, expo=expo, logZ=logZ, wr=self.wq * rho, T=T)

    def _cov(self, ev: _Eval, u: np.ndarray) -> np.ndarray:
        """C u: the coordinates of rho (psi - <psi>_rho), psi the field of coordinates u."""
        kb = self.kbasis
        psi = kb.synth(self.to_native(u)).ravel()
        f = ev.rho * (psi - float(ev.wr @ psi))
        return self.from_native(kb.analys(f.reshape(kb.shape)))

    def _jv(self, ev: _Eval, v: np.ndarray) -> np.ndarray:
        return v - (self.s / ev.nu) * self._cov(ev, self.gg * v)

    def jacobian(self, ev: _Eval) -> np.ndarray:
        return np.stack([self._jv(ev, e) for e in np.eye(self.n)], axis=1)

    def d_nu(self, ev: _Eval) -> np.ndarray:
        c = ev.expo - float(ev.wr @ ev.expo)
        kb = self.kbasis
        return self.from_native(kb.analys((ev.rho * c).reshape(kb.shape))) / ev.nu

    def solve(self, ev: _Eval, rhs: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
        if self.dense:
            return np.linalg.lstsq(self.jacobian(ev), rhs, rcond=1e-13)[0]
        op = LinearOperator((self.n, self.n), matvec=lambda v: self._jv(ev, v), dtype=float)
        sol, _ = gmres(op, rhs, rtol=rtol, atol=0.0, restart=min(self.n, 200), maxiter=20)
        return sol

    def bordered(self, ev: _Eval, nu_ref: float, t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        dn = nu_ref * self.d_nu(ev)
        if self.dense:
            A = np.empty((self.n + 1, self.n + 1))
            A[: self.n, : self.n] = self.jacobian(ev)
            A[: self.n, self.n] = dn
            A[self.n] = t
            return np.linalg.solve(A, rhs)
        n = self.n

        def mv(v):
            out = np.empty(n + 1)
            out[:n] = self._jv(ev, v[:n]) + dn * v[n]
            out[n] = t @ v
            return out
        op = LinearOperator((n + 1, n + 1), matvec=mv, dtype=float)
        sol, _ = gmres(op, rhs, rtol=1e-11, atol=0.0, restart=min(n + 1, 200), maxiter=20)
        return sol

    def spectra(self, ev: _Eval, k: int = 6) -> dict:
        """The smallest eigenvalues of S (all of them when dense), ascending: {"main": (eigenvalues, 1)}."""
        r = np.sqrt(self.gg)
        if self.dense:
            C = np.stack([self._cov(ev, e) for e in np.eye(self.n)], axis=1)
            S = -(self.s / ev.nu) * (r[:, None] * C * r[None, :])
            S[np.diag_indices_from(S)] += 1.0
            return {"main": (scipy.linalg.eigvalsh(0.5 * (S + S.T)), 1)}
        op = LinearOperator((self.n, self.n), dtype=float,
                            matvec=lambda v: v - (self.s / ev.nu) * r * self._cov(ev, r * v))
        k = min(k, self.n - 1)
        while True:
            vals = np.sort(eigsh(op, k=k, which="SA", tol=1e-10, return_eigenvectors=False))
            if vals[-1] >= -INDEX_TOL or k >= self.n - 1:
                return {"main": (vals, 1)}
            k = min(2 * k, self.n - 1)

    def coefficients(self, ev: _Eval) -> np.ndarray:
        b = self.basis
        return b.to_canonical(b.analys(ev.rho.reshape(b.shape)))

    def from_coefficients(self, c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=complex)
        c = sphere.resize(c / (np.real(c[0]) / _SQRT_4PI), self.kbasis.lmax)
        return self.from_native(self.kbasis.from_canonical(c))

    def grid_values(self, c: np.ndarray) -> np.ndarray:
        b = self.basis
        return b.synth(b.from_canonical(sphere.resize(np.asarray(c, dtype=complex), b.lmax))).ravel()

    @staticmethod
    def projection(c: np.ndarray, mode: int) -> float:
        return float(np.real(c[mode * (mode + 1) // 2]))

    @staticmethod
    def amplitude(c: np.ndarray, mode: int) -> float:
        return _sphere_amplitude(c, mode)


def _problem(model: Model, degree: int, representation: str) -> _Problem:
    if model.d == 2:
        if representation not in ("even", "full"):
            raise ValueError(f"on S^1 the representation is 'even' or 'full' (or 'auto'), got {representation!r}")
        return _CircleProblem(model, degree, even=representation == "even")
    if representation not in ("zonal", "general"):
        raise ValueError(f"on S^2 the representation is 'zonal' or 'general' (or 'auto'), got {representation!r}")
    return _ZonalProblem(model, degree) if representation == "zonal" else _Krylov(model, degree)


def _is_even_potential(model: Model) -> bool:
    """Whether V(theta) = V(-theta) on S^1 (no perceptron, or every direction on the x axis without ...)."""
    p = model.perceptron
    if p is None:
        return True
    th = np.linspace(0.1, 3.0, 7)
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    xr = np.stack([np.cos(th), -np.sin(th)], axis=1)
    return bool(np.allclose(model.potential(x), model.potential(xr), rtol=0.0, atol=1e-14))


# --- Newton --------------------------------------------------------------------------------------------------
def _newton(p: _Problem, x0: np.ndarray, nu: float, tol: float, max_iter: int) -> tuple[_Eval, int, bool, str]:
    """Damped Newton on R(x) = x - T(x) at fixed nu (backtracking on |R|)."""
    x = np.array(x0, dtype=float)
    ev = p.evaluate(x, nu)
    R = p.residual(ev)
    r = float(np.linalg.norm(R))
    for it in range(1, max_iter + 1):
        if np.max(np.abs(R), initial=0.0) <= tol:
            return ev, it - 1, True, f"converged in {it - 1} Newton steps"
        dx = p.solve(ev, -R, rtol=min(1e-2, r)) if isinstance(p, _Krylov) else p.solve(ev, -R)
        a = 1.0
        while True:
            ev_new = p.evaluate(x + a * dx, nu)
            R_new = p.residual(ev_new)
            r_new = float(np.linalg.norm(R_new))
            if r_new <= (1.0 - 0.25 * a) * r or a < 1.0 / 256:
                break
            a *= 0.5
        if not np.isfinite(r_new):
            return ev, it, False, "Newton diverged (non-finite residual)"
        if a < 1.0 / 256 and r_new >= r:
            # within a hundred times the tolerance the residual is at its round-off floor (a state with a
            # symmetry: the minimum-norm steps turn it along the orbit)
            rmax = float(np.max(np.abs(R), initial=0.0))
            if rmax <= 100 * tol:
                return ev, it - 1, True, f"converged in {it - 1} Newton steps to |R| = {rmax:.1e}, its round-off floor"
            return ev, it, False, f"Newton stalled at |R| = {r:.2e} (no descent along the Newton step)"
        x, ev, R, r = x + a * dx, ev_new, R_new, r_new
    ok = np.max(np.abs(R), initial=0.0) <= tol
    return ev, max_iter, bool(ok), (f"converged in {max_iter} Newton steps" if ok else
                                    f"no convergence in {max_iter} Newton steps (|R| = {r:.2e})")


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
        from .pde import space_for
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
    from .pde import space_for
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
    from .pde import space_for
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
    from .pde import space_for
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
    from .pde import space_for
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


# --- continuation ------------------------------------------------------------------------------------------
@dataclass
class ContinuationOptions:
    """Step control of the pseudo-arclength continuation (module Notes). Steps are arclengths in
    X = (x, nu / nu_ref), x the reduced unknowns (orthonormal coordinates of rho; S^1: sqrt 2 Re c_k).

    Attributes
    ----------
    first_step : float
        The first step from a branch point or a state (small: the kind is read from the first points).
    max_step, min_step : float
        Bounds of the step; below ``min_step`` the side stops ("step").
    max_points : int
        Points per side of a branch (both sides: twice as many).
    max_angle : float
        Largest turn of the tangent per step (radians); a step that turns more is halved.
    tol : float
        The corrector stops at max |x - T(x)| <= tol.
    max_corrections : int
        Newton steps of one correction; a correction that needs more is retried at half the step.
    tail_max : float
        A point whose spectral tail at the degree exceeds this is not resolved: :func:`branch_from_uniform`
        follows the branch again from the start at twice the degree (up to ``max_degree``; ``Branch.refinements``
        says where and why), and at ``max_degree`` the side stops there ("resolution").
    max_degree : int or None
        The largest degree a branch from the uniform state is raised to; None: ``BRANCH_MAX_DEGREE`` of the
        manifold (256 on S^1, 128 on S^2), or the starting degree if larger.
    """

    first_step: float = 1e-3
    max_step: float = 0.05
    min_step: float = 1e-7
    max_points: int = 100
    max_angle: float = 0.1
    tol: float = 1e-12
    max_corrections: int = 8
    tail_max: float = 1e-8
    max_degree: int | None = None

    def __post_init__(self) -> None:
        for name in ("first_step", "max_step", "min_step", "max_angle", "tol", "tail_max"):
            setattr(self, name, check.number(f"continuation option {name}", getattr(self, name), gt=0))
        check.integer("continuation option max_points", self.max_points, ge=2)
        check.integer("continuation option max_degree", self.max_degree, ge=4, allow_none=True)
        check.integer("continuation option max_corrections", self.max_corrections, ge=2)
        if self.min_step > self.first_step or self.first_step > self.max_step:
            raise ValueError(f"continuation options: need min_step <= first_step <= max_step, got {self.min_step:g}, "
                             f"{self.first_step:g}, {self.max_step:g}")

    @classmethod
    def from_kwargs(cls, options: dict) -> "ContinuationOptions":
        check.known_options("branch_from_uniform / continue_branch", options,
                            [f for f in cls.__dataclass_fields__])
        return cls(**options)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class _Tracer:
    """Predictor–corrector continuation of one problem in X = (x, mu), nu = mu nu_ref."""

    def __init__(self, p: _Problem, nu_ref: float, opts: ContinuationOptions, mode: int | None,
                 bounds: tuple[float, float], f_uniform: float | None) -> None:
        self.p, self.nu_ref, self.o, self.mode = p, float(nu_ref), opts, mode
        self.bounds, self.f_uniform = bounds, f_uniform
        self.n = p.n
        self.corrections = 0
        self.unresolved: dict | None = None

    def nu(self, X: np.ndarray) -> float:
        return float(X[-1]) * self.nu_ref

    def correct(self, X_pred: np.ndarray, t: np.ndarray, X0: np.ndarray, s: float):
        """Newton on {R(X) = 0, t . (X - X0) = s} from X_pred: (X, evaluation, steps) or None."""
        X = np.array(X_pred, dtype=float)
        r_prev = math.inf
        for it in range(self.o.max_corrections + 1):
            nu = self.nu(X)
            if not (nu > 0 and np.all(np.isfinite(X))):
                return None
            ev = self.p.evaluate(X[: self.n], nu)
            R = self.p.residual(ev)
            r = float(np.max(np.abs(R), initial=0.0))
            self.corrections += 1
            if r <= self.o.tol:
                return X, ev, it
            if it == self.o.max_corrections or not np.isfinite(r) or (it >= 2 and r > 0.5 * r_prev):
                return None
            r_prev = r
            rhs = -np.concatenate([R, [t @ (X - X0) - s]])
            X = X + self.p.bordered(ev, self.nu_ref, t, rhs)
        return None

    def tangent(self, ev: _Eval, t_prev: np.ndarray) -> np.ndarray:
        rhs = np.zeros(self.n + 1)
        rhs[-1] = 1.0
        t = self.p.bordered(ev, self.nu_ref, t_prev, rhs)
        t /= np.linalg.norm(t)
        return t if t @ t_prev >= 0 else -t

    def record(self, X: np.ndarray, ev: _Eval, t: np.ndarray, h: float, side: int, steps: int) -> dict:
        """A point of a branch: its unknowns and tangent (what a resume continues from), its state's numbers."""
        c = self.p.coefficients(ev)
        spectra = self.p.spectra(ev)
        index = {name: int(np.sum(vals < -INDEX_TOL)) for name, (vals, _) in spectra.items()}
        unstable = sum(mult * index[name] for name, (_, mult) in spectra.items())
        from .pde import space_for
        space = space_for(self.p.model.d)[1]
        mode = self.mode
        return {"side": side, "x": np.array(X[: self.n]), "nu": self.nu(X), "mu": float(X[-1]), "t": np.array(t),
                "h": float(h), "steps": int(steps), "coeffs": c, "free_energy": self.p.free_energy(ev),
                "amplitude": self.p.amplitude(c, mode) if mode else float(space.l2_norm(c - space.resize(
                    np.array([space.mass_coefficient]), self.p.degree))),
                "projection": self.p.projection(c, mode) if mode else math.nan,
                "index": index, "unstable": int(unstable), "stable": unstable == 0, "tail": float(space.tail(c)),
                "spectra": {k: v[0] for k, v in spectra.items()}}

    def restore(self, q: dict) -> dict:
        """A point from what :meth:`record` kept of it (side, x, mu, t, h, steps: a resume's archive rows): its
        record again, the same numbers (the same evaluation of the same unknowns)."""
        x = np.asarray(q["x"], dtype=float)
        X = np.concatenate([x, [float(q["mu"])]])
        rec = self.record(X, self.p.evaluate(x, self.nu(X)), np.asarray(q["t"], dtype=float), float(q["h"]),
                          int(q["side"]), int(q["steps"]))
        return rec

    def follow(self, points: list, side: int, uniform_start: bool, callback=None,
               stop_request: Callable[[], bool] | None = None) -> tuple[str, str]:
        """Continue a side from its last point (``points`` holds at least one; new points are appended and
        handed to ``callback``). Returns (stop reason, message)."""
        o, lo, hi = self.o, *self.bounds
        last = points[-1]
        X = np.concatenate([last["x"], [last["mu"]]])
        t, h = last["t"], last["h"]
        count = sum(1 for q in points if not q.get("start"))
        # from the bifurcation point the first tangent (the critical mode) is the branch's only for a pitchfork:
        # a transcritical branch leaves at an angle, so the first step is not held to max_angle
        cos_max = -1.0 if last.get("origin") else math.cos(o.max_angle)
        while True:
            if count >= o.max_points:
                return "max_points", f"{o.max_points} points (max_points)"
            if stop_request is not None and stop_request():
                return "interrupted", "interrupted"
            while True:
                sol = self.correct(X + h * t, t, X, h)
                if sol is not None:
                    X_new, ev, steps = sol
                    t_new = self.tangent(ev, t)
                    if t_new @ t >= cos_max:
                        break
                h *= 0.5
                if h < o.min_step:
                    return "step", (f"the step fell below min_step = {o.min_step:g} at nu = {self.nu(X):.10g} "
                                    "(a correction failed or the tangent turned too fast)")
            nu_new = self.nu(X_new)
            if nu_new < lo or nu_new > hi:
                bound = lo if nu_new < lo else hi
                end = self._land(X, t, h, bound)
                if end is not None:
                    Xb, evb, tb = end
                    rec = self.record(Xb, evb, tb, h, side, 0)
                    if rec["tail"] <= o.tail_max:
                        points.append(rec)
                        if callback:
                            callback(rec)
                return "range", f"reached nu = {bound:.10g}, the end of noise_range"
            rec = self.record(X_new, ev, t_new, h, side, steps)
            if rec["tail"] > o.tail_max:
                self.unresolved = {"nu": nu_new, "tail": rec["tail"], "tail_max": o.tail_max}
                top = o.max_degree is not None and self.p.degree >= o.max_degree
                return "resolution", (f"at nu = {nu_new:.10g} the state's spectral tail {rec['tail']:.1e} > tail_max "
                                      f"{o.tail_max:.0e}: the degree {self.p.degree} no longer resolves it"
                                      + (" (max_degree: raise it to go on)" if top else ""))
            # the next step from the Newton count of this one and the turn of the tangent
            turn = math.acos(min(1.0, float(t_new @ t)))
            grow = 2.0 if steps <= 2 else 1.3 if steps <= 3 else 1.0 if steps <= 5 else 0.6
            if turn > 0.5 * o.max_angle:
                grow = min(grow, 1.0)
            rec["h"] = min(o.max_step, h * grow)
            points.append(rec)
            count += 1
            if callback:
                callback(rec)
            X, t, h = X_new, t_new, rec["h"]
            cos_max = math.cos(o.max_angle)
            if uniform_start and count >= 3 and np.max(np.abs(X[: self.n])) < 0.5 * o.first_step:
                return "uniform", f"returned to the uniform state at nu = {nu_new:.10g}"

    def _land(self, X0: np.ndarray, t: np.ndarray, h: float, bound: float):
        """The point of the segment from X0 (arclength s in (0, h) along t) where nu = bound."""
        f0 = self.nu(X0) - bound
        sol = self.correct(X0 + h * t, t, X0, h)
        if sol is None:
            return None
        root = self._secant(X0, t, 0.0, f0, h, self.nu(sol[0]) - bound, lambda X, ev: self.nu(X) - bound)
        if root is None:
            return None
        Xr, evr = root
        return Xr, evr, self.tangent(evr, t)

    def _secant(self, X0, t, s0, f0, s1, f1, f, tol: float = 1e-13):
        """The root of f(X(s)) on [s0, s1] (f0, f1 of opposite signs), X(s) the corrected point at arclength s
        from X0 along t: Illinois' regula falsi. Returns (X, evaluation) or None."""
        if f0 == 0.0:
            s1, f1 = s0, f0
        best = None
        side = 0
        for _ in range(80):
            s = s1 - f1 * (s1 - s0) / (f1 - f0) if f1 != f0 else 0.5 * (s0 + s1)
            if not (min(s0, s1) < s < max(s0, s1)):
                s = 0.5 * (s0 + s1)
            sol = self.correct(X0 + s * t, t, X0, s)
            if sol is None:
                return best
            X, ev, _ = sol
            fs = f(X, ev)
            best = (X, ev)
            if fs == 0.0 or abs(s1 - s0) <= tol * max(1.0, abs(s1)):
                return best
            if (fs > 0) == (f1 > 0):
                s1, f1 = s, fs
                if side == -1:
                    f0 *= 0.5
                side = -1
            else:
                s0, f0 = s1, f1
                s1, f1 = s, fs
                side = +1
        return best

    def locate(self, P: dict, Q: dict, f: Callable, singular: bool = False) -> dict | None:
        """The point between consecutive points P and Q (Q computed from P along P's tangent) where f changes
        sign; f takes (X, evaluation). ``singular``: the point is a branch point, where the bordered system
        (hence the tangent) is singular: its record keeps P's tangent, the direction the branch came from."""
        X0 = np.concatenate([P["x"], [P["mu"]]])
        X1 = np.concatenate([Q["x"], [Q["mu"]]])
        t = P["t"]
        s1 = float(t @ (X1 - X0))
        sol0 = self.correct(X0, t, X0, 0.0)
        sol1 = self.correct(X1, t, X0, s1)
        if sol0 is None or sol1 is None:
            return None
        f0, f1 = f(*sol0[:2]), f(*sol1[:2])
        if (f0 > 0) == (f1 > 0) and f0 != 0.0:
            return None
        root = self._secant(X0, t, 0.0, f0, s1, f1, f)
        if root is None:
            return None
        X, ev = root
        return self.record(X, ev, np.array(t) if singular else self.tangent(ev, t), P["h"], P["side"], 0)

    def events(self, points: list) -> dict:
        """Folds, branch points, symmetry-breaking bifurcations and free-energy crossings between
        consecutive points of one side (in order)."""
        out = {"folds": [], "bifurcations": [], "crossings": []}
        for P, Q in zip(points[:-1], points[1:]):
            if P.get("origin"):
                # the bifurcation point itself: the bordered system is singular there, and the branch's own
                # kind says which way it leaves
                continue
            fold = (P["t"][-1] > 0) != (Q["t"][-1] > 0)
            if fold:
                t_ref = P["t"]
                hit = self.locate(P, Q, lambda X, ev: self.tangent(ev, t_ref)[-1])
                if hit is not None:
                    out["folds"].append(hit)
            for name in P["index"]:
                a = P["index"][name]
                b = Q["index"].get(name, a)
                if a == b or (name == "main" and fold):
                    continue
                k = min(a, b)
                hit = self.locate(P, Q, lambda X, ev, name=name, k=k: self.p.spectra(ev)[name][0][k],
                                  singular=name == "main")
                if hit is not None:
                    hit["block"] = name
                    hit["kind"] = "branch point" if name == "main" else "symmetry-breaking"
                    out["bifurcations"].append(hit)
            if self.f_uniform is not None:
                fu = self.f_uniform
                if (P["free_energy"] - fu > 0) != (Q["free_energy"] - fu > 0):
                    hit = self.locate(P, Q, lambda X, ev: self.p.free_energy(ev) - fu)
                    if hit is not None:
                        out["crossings"].append(hit)
        return out


# --- branches ------------------------------------------------------------------------------------------------
@dataclass
class Branch:
    """A branch of stationary states in the noise nu (module Notes), its points ordered along the curve
    (side -1 reversed, the start, side +1).

    Attributes
    ----------
    model : Model
        The model (its noise is the continuation parameter: each point has its own, ``noise``).
    mode : int or None
        The mode the branch leaves the uniform state along (None for :func:`continue_branch`).
    degree, representation : the resolution and the unknowns (as :class:`StationaryState`).
    noise, amplitude, projection, free_energy, stable, unstable, side, tail : ndarray (P,)
        Per point: nu; |c_mode| (S^1) or sqrt(sum_m mult |c_lm|^2) (S^2) of the canonical coefficients (the
        L^2(sigma) distance to the uniform state for a branch without mode); the mode's coefficient along
        the branch, signed; F; no unstable direction; their number; the side (-1, 0 the start, +1); the
        spectral tail.
    coeffs : ndarray (P, ncoef) complex
        Canonical coefficients of every point.
    threshold : float or None
        The nu where the branch leaves the uniform state (found as the zero of S's mode entry at rho = 1);
        with a perceptron, the perceptron-free model's (the branch is imperfect).
    kind : str
        "supercritical", "subcritical", "transcritical", "imperfect" (perceptron), or "" (continue_branch).
    normal_form : float or None
        The coefficient the kind was judged by: a2 of nu - nu_l = a2 p^2 (pitchfork) or a1 of nu - nu_l =
        a1 p (transcritical), p the mode's canonical coefficient, fitted to the computed points (module
        Notes); ``normal_form_fit`` has every fitted coefficient (a1 .. a4).
    folds : list of dict
        Located folds (nu, amplitude, free_energy, stable, ... as the points).
    bifurcations : list of dict
        Located branch points ("branch point": in the branch's own representation, where
        :func:`continue_branch` switches) and symmetry-breaking bifurcations (into the odd functions on S^1,
        the orders m >= 1 on S^2), with ``block`` and ``kind``.
    transition : float or None
        Where the branch takes over from the uniform state as the free-energy minimiser: the largest nu at
        which a stable state of the branch has F = F_u (a crossing located on the branch), or the threshold
        for a supercritical branch (F < F_u wherever it exists, equal at nu_l); None if a stable state of
        the branch never reaches F_u, or without a uniform stationary state (perceptron).
    free_energy_uniform : float or None
        F of the uniform state (-s gamma g_0 / 2), constant in nu; None with a perceptron.
    stop : dict
        Why each side ended: {side: (reason, message)}; reasons "range" (noise_range reached), "uniform"
        (back at the uniform state), "resolution", "step", "max_points", "interrupted".
    refinements : list of dict
        Each raise of the degree on the way (:func:`branch_from_uniform`): {"from", "to": the degrees, "nu":
        where the state was no longer resolved, "tail", "tail_max": its spectral tail and the bound}; the branch
        was then followed again from its start at the new degree, so that every point and event is of one
        discretisation.
    children : list of Branch
        Branches switched to at its branch points (:func:`continue_branch` with ``switch``); ``parent_point``
        is the branch point a child starts from.
    unknowns, tangents : ndarray (P, n), (P, n + 1)
        The reduced unknowns x of every point and the unit tangent in (x, nu / nu_ref): what a resume or
        :meth:`state` continues from.
    noise_range, nu_ref, options, wall_time
        The range followed, the noise scale of the arclength (the threshold, or the start's nu), the
        :class:`ContinuationOptions` as a dict, the seconds taken.
    """

    model: Model
    mode: int | None
    degree: int
    representation: str
    noise: np.ndarray
    amplitude: np.ndarray
    projection: np.ndarray
    free_energy: np.ndarray
    stable: np.ndarray
    unstable: np.ndarray
    side: np.ndarray
    tail: np.ndarray
    coeffs: np.ndarray
    unknowns: np.ndarray
    tangents: np.ndarray
    threshold: float | None
    kind: str
    normal_form: float | None
    normal_form_fit: dict
    folds: list
    bifurcations: list
    transition: float | None
    free_energy_uniform: float | None
    noise_range: tuple
    nu_ref: float
    options: dict
    stop: dict
    children: list = field(default_factory=list)
    parent_point: dict | None = None
    wall_time: float = 0.0
    refinements: list = field(default_factory=list)

    @property
    def fold_noise(self) -> np.ndarray:
        return np.array([f["nu"] for f in self.folds])

    def state(self, i: int, eigenvalues: int = 8) -> StationaryState:
        """Point i as a :class:`StationaryState` (its eigenvalues computed now)."""
        wall0 = time.perf_counter()
        with blas_threads(1):
            p = _problem(self.model, self.degree, self.representation)
            ev = p.evaluate(np.array(self.unknowns[i]), float(self.noise[i]))
            return _state(p, ev, 0, True, f"point {i} of a branch", eigenvalues, None, wall0)

    def nearest(self, nu: float, stable: bool | None = None) -> int:
        """The index of the point nearest to nu (among the stable or unstable ones if asked)."""
        ok = np.ones(len(self.noise), bool) if stable is None else (self.stable == stable)
        if not ok.any():
            raise ValueError(f"no {'stable' if stable else 'unstable'} point on the branch")
        d = np.where(ok, np.abs(self.noise - nu), np.inf)
        return int(np.argmin(d))

    def summary(self) -> str:
        m = self.model
        lines = [f"branch of S^{m.d - 1}, beta = {m.beta:g}, {m.flow}, gamma = {m.strength:g}"
                 + (f", mode {self.mode}" if self.mode else "") + f" ({self.representation}, degree {self.degree}): "
                 f"{len(self.noise)} points, nu in [{np.min(self.noise):.6g}, {np.max(self.noise):.6g}]"]
        lines += [f"  {line}" for line in refinement_lines(self.refinements, self.options.get("max_degree"))]
        if self.threshold is not None:
            lines.append(f"  threshold nu = {self.threshold:.12g}; kind: {self.kind}"
                         + (f" (normal form {self.normal_form:+.6g})" if self.normal_form is not None else ""))
        # amplitude: |c_mode| on a branch from uniform, else the L^2 distance to the uniform state
        amp = f"|c_{self.mode}|" if self.mode else "||rho - 1||"
        scale = max(1.0, float(np.max(np.abs(self.amplitude)))) if len(self.amplitude) else 1.0
        for f_ in self.folds:
            # a turning point in nu at the uniform state is where the branch crosses it: the pitchfork
            at_uniform = " (at the uniform state: the pitchfork)" if abs(f_["amplitude"]) <= 1e-3 * scale else ""
            lines.append(f"  fold at nu = {f_['nu']:.10g}, {amp} = {f_['amplitude']:.6g}{at_uniform}")
        for b in self.bifurcations:
            lines.append(f"  {b['kind']} ({b['block']}) at nu = {b['nu']:.10g}, {amp} = {b['amplitude']:.6g}")
        if self.free_energy_uniform is not None:
            lines.append("  transition: " + ("none on the computed branch" if self.transition is None else
                                             f"nu = {self.transition:.10g}"))
        for side, (reason, msg) in sorted(self.stop.items()):
            lines.append(f"  side {side:+d} ended: {reason} — {msg}")
        return "\n".join(lines)


def refinement_lines(refinements: list, max_degree: int | None = None) -> list[str]:
    """One line per raise of a branch's degree (``Branch.refinements``)."""
    cap = f" (of max_degree {max_degree})" if max_degree else ""
    return [f"degree raised {r['from']} -> {r['to']}{cap}: at nu = {r['nu']:.10g} the state's spectral tail "
            f"{r['tail']:.1e} > tail_max {r['tail_max']:.0e} at degree {r['from']}; the branch was followed again "
            "from its start" for r in refinements]


def _check_range(noise_range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in noise_range)
    except (TypeError, ValueError):
        raise ValueError(f"noise_range must be a pair (lo, hi) of numbers, got {noise_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ValueError(f"noise_range must be (lo, hi) with 0 < lo < hi, got {noise_range!r}")
    return lo, hi


def _threshold(p: _Problem, mode: int, nu0: float) -> float:
    """The zero of S's entry of the mode at rho = 1, 1 - (s gamma / nu) g C_kk, by the secant method in nu
    (the entry is a function of 1/nu: converged to round-off in a few steps)."""
    k = p.mode_index(mode)
    x0 = np.zeros(p.n)

    def f(nu):
        ev = p.evaluate(x0, nu)
        C = p.covariance(ev)[k, k] if isinstance(p, _Dense) else p._cov(ev, np.eye(p.n)[k])[k]
        return 1.0 - (p.s / nu) * p.gamma * p.g[k] * C
    a, b = nu0, 1.1 * nu0
    fa, fb = f(a), f(b)
    for _ in range(100):
        if fb == fa:
            break
        c = b - fb * (b - a) / (fb - fa)
        a, fa, b = b, fb, c
        fb = f(b)
        if abs(b - a) <= 4e-16 * abs(b):
            break
    return float(b)


def _fit_normal_form(points_by_side: dict, nu_c: float, count: int = 8) -> dict:
    """nu - nu_c = a1 p + a2 p^2 + ... + a6 p^6 by least squares over the first ``count`` points of each side
    (p the mode's coefficient; the powers scaled to the largest |p| for the conditioning). The terms up to
    p^6 keep the higher orders out of a2 where it is small (near the switch of kind)."""
    P = np.concatenate([[q["projection"] for q in pts[:count]] for pts in points_by_side.values()])
    dn = np.concatenate([[q["nu"] - nu_c for q in pts[:count]] for pts in points_by_side.values()])
    scale = float(np.max(np.abs(P)))
    powers = np.arange(1, min(6, P.size) + 1)
    coef = np.linalg.lstsq((P[:, None] / scale) ** powers, dn, rcond=None)[0] / scale ** powers
    fit = {f"a{j}": float(c) for j, c in zip(powers, coef)}
    fit.update({"p_max": scale, "points": int(P.size),
                "first": {int(side): float(pts[0]["nu"] - nu_c) for side, pts in points_by_side.items() if pts}})
    return fit


def _judge(fit: dict, nu_c: float, sign: float) -> tuple[str, float]:
    """The kind from the fitted normal form: transcritical when the odd part (a1 p) is above 1e-7 nu_c at
    the fitted amplitudes (a symmetric pitchfork's is round-off, ~1e-14), else the sign of a2 against the
    side where the uniform state is unstable (nu < nu_c in ascent)."""
    if abs(fit["a1"]) * fit["p_max"] > 1e-7 * nu_c:
        return "transcritical", fit["a1"]
    a2 = fit["a2"]
    unstable_side = -sign                     # ascent: the uniform state is unstable below the threshold
    return ("supercritical" if a2 * unstable_side > 0 else "subcritical"), a2


def _assemble(tracer: _Tracer, model: Model, mode: int | None, sides: dict, start: dict | None, stop: dict,
              threshold: float | None, kind: str, nf: float | None, fit: dict, lo_hi: tuple, wall: float,
              parent_point: dict | None = None, events: bool = True) -> Branch:
    """The Branch of the sides' points (side -1 reversed, the start, side +1), its events located
    (``events``: not for an interrupted run)."""
    found_by_side = [tracer.events(([start] if start is not None else []) + sides[side])
                     for side in sorted(sides)] if events else []
    events = {"folds": [], "bifurcations": [], "crossings": []}
    for found in found_by_side:
        for k in events:
            events[k] += found[k]
    for k in ("folds", "bifurcations", "crossings"):
        events[k] = _merge_mirrors(events[k])
    if start is not None:
        order = list(reversed(sides.get(-1, []))) + [{**start, "side": 0}] + sides.get(+1, [])
    elif -1 in sides and +1 in sides:
        # both sides begin at the same state: it appears once
        order = list(reversed(sides[-1])) + sides[+1][1:]
    else:
        order = next(iter(sides.values()))

    def arr(key, dtype=float):
        return np.array([q[key] for q in order], dtype=dtype)
    f_u = tracer.f_uniform
    transition = None
    if f_u is not None:
        cands = [c["nu"] for c in events["crossings"] if c["stable"]]
        near = [side_pts[0] for side_pts in sides.values() if side_pts]
        if kind == "supercritical" and threshold is not None and near and all(q["stable"] for q in near):
            cands.append(threshold)
        transition = max(cands) if cands else None
    return Branch(model=model, mode=mode, degree=tracer.p.degree, representation=tracer.p.representation,
                  noise=arr("nu"), amplitude=arr("amplitude"), projection=arr("projection"),
                  free_energy=arr("free_energy"), stable=arr("stable", bool), unstable=arr("unstable", int),
                  side=arr("side", int), tail=arr("tail"), coeffs=np.array([q["coeffs"] for q in order]),
                  unknowns=np.array([q["x"] for q in order]), tangents=np.array([q["t"] for q in order]),
                  threshold=threshold, kind=kind, normal_form=nf, normal_form_fit=fit,
                  folds=sorted(events["folds"], key=lambda q: q["nu"]),
                  bifurcations=sorted(events["bifurcations"], key=lambda q: q["nu"]), transition=transition,
                  free_energy_uniform=f_u, noise_range=lo_hi, nu_ref=tracer.nu_ref, options=tracer.o.to_dict(),
                  stop=stop, wall_time=wall, parent_point=parent_point)


def _merge_mirrors(events: list) -> list:
    """One entry for the events of both sides of a symmetric branch (a pitchfork's mirror images: the same nu
    and amplitude), with the sides it was found on."""
    out: list = []
    for e in events:
        twin = next((o for o in out if abs(o["nu"] - e["nu"]) <= 1e-9 * abs(e["nu"])
                     and abs(o["amplitude"] - e["amplitude"]) <= 1e-7 * max(1.0, abs(e["amplitude"]))
                     and o.get("block") == e.get("block")), None)
        if twin is None:
            out.append({**e, "sides": [e["side"]]})
        elif e["side"] not in twin["sides"]:
            twin["sides"].append(e["side"])
    return out


def branch_from_uniform(model: Model, mode: int = 1, degree: int | None = None, noise_range=None, *,
                        representation: str = "auto", callback: Callable[[dict], None] | None = None,
                        restart: dict | None = None, stop_request: Callable[[], bool] | None = None,
                        **options) -> Branch:
    """The branch of stationary states that leaves the uniform state at the threshold of ``mode``, by
    pseudo-arclength continuation in the noise (module Notes), with its kind, folds, bifurcations and
    transition.

    Parameters
    ----------
    model : Model
        d = 2 or 3, USA, ascent (in descent the uniform state is stable at every noise: no branch leaves
        it), a gradient perceptron or none; its ``noise`` is not used (nu is the parameter).
    mode : int
        The Fourier mode k (S^1) or harmonic degree l (S^2), >= 1, within the kernel's bandwidth.
    degree : int
        Resolution of the states to start from (Fourier modes K on S^1, degree L on S^2); default
        ``BRANCH_DEGREE`` (64 on S^1, 32 on S^2). It must hold the mode (K > k, L >= l). Where a state of the
        branch is not resolved (its spectral tail above ``tail_max``: it sharpens as the branch turns), the
        branch is followed again from its start at twice the degree, up to the option ``max_degree``
        (``BRANCH_MAX_DEGREE``: 256 on S^1, 128 on S^2); ``Branch.refinements`` and the summary say so.
    noise_range : (lo, hi)
        The range of nu followed, 0 < lo < hi; default (0.25, 1.5) times the threshold. A subcritical branch
        folds above the threshold: hi must reach past the fold to see it.
    representation : "auto", "even", "full", "zonal", "general"
        As :func:`stationary_state`; "auto": S^1 "even", S^2 "zonal" (the critical mode is then simple),
        and with a perceptron that breaks the symmetry "full" / "general".
    callback : callable, optional
        Receives every point (a dict: side, x, nu, t, h, coeffs, free_energy, amplitude, ...) as computed,
        {"event": "side_end", "side", "reason", "message"} when a side ends, and {"event": "degree", "from",
        "to", "unknowns", "threshold", "nu", "tail", "tail_max"} when the degree is raised: the points before it are
        dropped, the branch starts again at the new degree (the archive's hook).
    restart : dict, optional
        {"points": [...], "ended": {side: (reason, message)}, "raised": [...]}: the points already computed
        at the setup's degree (as the callback received them), the sides already ended and the raises of the
        degree before them; the run continues the unfinished side from its last point exactly as it would
        have gone on.
    stop_request : callable, optional
        Polled before each step; True ends the current side with reason "interrupted".
    **options
        :class:`ContinuationOptions` (first_step, max_step, min_step, max_points per side, max_angle, tol,
        max_corrections, tail_max, max_degree).

    Returns
    -------
    Branch
    """
    return prepare_branch(model, mode, degree, noise_range, representation=representation, **options).run(
        callback=callback, restart=restart, stop_request=stop_request)


@dataclass
class BranchSetup:
    """A checked :func:`branch_from_uniform` (:func:`prepare_branch`): its threshold is known, nothing is
    followed yet; :meth:`run` follows the branch."""

    model: Model
    mode: int
    degree: int
    representation: str
    threshold: float
    noise_range: tuple
    options: ContinuationOptions
    _problem: _Problem = field(repr=False)

    @property
    def max_degree(self) -> int:
        """The largest degree the branch is raised to (``options.max_degree``, resolved)."""
        return int(self.options.max_degree)

    @property
    def unknowns(self) -> int:
        """The number of reduced unknowns at this degree (the width of a point's ``x``)."""
        return int(self._problem.n)

    def at_degree(self, degree: int) -> "BranchSetup":
        """The same branch set up at another degree (the same noise range and options)."""
        return prepare_branch(self.model, self.mode, degree, self.noise_range, representation=self.representation,
                              **self.options.to_dict())

    @_one_blas_thread
    def run(self, callback: Callable[[dict], None] | None = None, restart: dict | None = None,
            stop_request: Callable[[], bool] | None = None) -> Branch:
        """Follow the branch (the arguments as :func:`branch_from_uniform`'s)."""
        return _follow_branch(self, callback, restart, stop_request)


def branch_degrees(d: int, degree: int | None = None, max_degree: int | None = None) -> tuple[int, int]:
    """(the starting degree, the largest it is raised to) of a branch on S^{d-1}: ``BRANCH_DEGREE`` and
    ``BRANCH_MAX_DEGREE`` by default, the cap at least the start."""
    start = BRANCH_DEGREE[d] if degree is None else int(degree)
    cap = max(BRANCH_MAX_DEGREE[d], start) if max_degree is None else int(max_degree)
    return start, cap


@_one_blas_thread
def prepare_branch(model: Model, mode: int = 1, degree: int | None = None, noise_range=None, *,
                   representation: str = "auto", **options) -> BranchSetup:
    """Check the arguments of :func:`branch_from_uniform` and locate the threshold, without following the
    branch: every refusal of :func:`branch_from_uniform` is raised here (the run layer prepares before it
    creates an archive)."""
    _check_model(model, "branch_from_uniform")
    check.integer("mode", mode, ge=1)
    opts = ContinuationOptions.from_kwargs(options)
    if model.flow != "ascent":
        raise ValueError("branch_from_uniform: in descent the uniform state is stable at every noise (S = I + "
                         "(gamma/nu) G^(1/2) C G^(1/2) > 0): no branch leaves it; use flow='ascent'")
    if model.beta == 0 and mode >= 2:
        raise ValueError(f"branch_from_uniform: at beta = 0 the kernel has degree 1 only: mode {mode} has no "
                         "threshold")
    check.integer("degree", degree, ge=4, allow_none=True)
    degree, cap = branch_degrees(model.d, degree, opts.max_degree)
    if cap < degree:
        raise ValueError(f"max_degree {cap} must be >= degree {degree} (the degree the branch starts from)")
    opts.max_degree = cap
    need = _min_degree(model.d, mode)
    if degree < need:
        raise ValueError(f"degree {degree} cannot represent mode {mode}: need degree >= {need} "
                         f"({'K > k Fourier modes' if model.d == 2 else 'L >= l'})")
    bw = kernel_bandwidth(model.beta, model.d, KERNEL_TOL)
    if mode > bw:
        raise ValueError(f"mode {mode} is beyond the kernel's bandwidth at beta = {model.beta:g} (degree {bw}: "
                         "g_l <= 1e-17 g_0 above it): its threshold is below round-off")
    perceptron = model.perceptron is not None
    if representation == "auto":
        if model.d == 2:
            representation = "even" if _is_even_potential(model) else "full"
        else:
            representation = "zonal" if _is_zonal_potential(model) else "general"
    check.choice("representation", representation, REPRESENTATIONS[1:])
    p = _problem(model, degree, representation)
    bare = _problem(model.replace(perceptron=None), degree, representation) if perceptron else p
    g_mode = float(model.energy_multipliers(mode)[mode])
    nu_c = _threshold(bare, mode, model.strength * g_mode)
    lo, hi = _check_range(noise_range) if noise_range is not None else (0.25 * nu_c, 1.5 * nu_c)
    if perceptron and mode != 1:
        raise ValueError("branch_from_uniform: with a perceptron (an imperfect bifurcation) only mode 1 is "
                         "followed, from the state near uniform at the largest noise; use continue_branch from a "
                         "state of another mode")
    if not perceptron and not (lo < nu_c < hi):
        raise ValueError(f"noise_range ({lo:g}, {hi:g}) must contain the threshold of mode {mode}, "
                         f"nu = {nu_c:.10g}")
    return BranchSetup(model=model, mode=mode, degree=int(degree), representation=representation, threshold=nu_c,
                       noise_range=(lo, hi), options=opts, _problem=p)


class _Unresolved(Exception):
    """A side of the branch met a state its degree does not resolve, below max_degree."""

    def __init__(self, where: dict) -> None:
        super().__init__(where)
        self.where = where


def _follow_branch(setup: BranchSetup, callback, restart, stop_request) -> Branch:
    """Follow the branch at the setup's degree; where a state is not resolved there (its tail above tail_max)
    and the degree is below max_degree, follow it again from the start at twice the degree (at most
    max_degree), telling the ``callback`` ({"event": "degree", "from", "to", "unknowns", "threshold", "nu",
    "tail", "tail_max"}) before the first point at the new degree."""
    wall0 = time.perf_counter()
    raised = list((restart or {}).get("raised", []))
    while True:
        try:
            branch = _follow_at_degree(setup, callback, restart, stop_request)
        except _Unresolved as e:
            new = setup.at_degree(min(2 * setup.degree, setup.max_degree))
            step = {"from": setup.degree, "to": new.degree, **e.where}
            raised.append(step)
            if callback:
                callback({"event": "degree", "unknowns": new.unknowns, "threshold": new.threshold, **step})
            setup, restart = new, None
            continue
        branch.refinements = raised
        branch.wall_time = time.perf_counter() - wall0
        return branch


def _follow_at_degree(setup: BranchSetup, callback, restart, stop_request) -> Branch:
    wall0 = time.perf_counter()
    model, mode, opts, p, nu_c = setup.model, setup.mode, setup.options, setup._problem, setup.threshold
    lo, hi = setup.noise_range
    perceptron = model.perceptron is not None
    tracer = _Tracer(p, nu_c, opts, mode, (lo, hi), p.uniform_free_energy())
    restart = restart or {"points": [], "ended": {}}
    stop = {int(k): tuple(v) for k, v in restart.get("ended", {}).items()}
    done = {}
    for q in restart.get("points", []):
        done.setdefault(int(q["side"]), []).append(tracer.restore(q))

    if perceptron:
        # imperfect: the state continued from the one near uniform at the largest noise, downwards
        sides = {-1: done.get(-1, [])}
        if not sides[-1]:
            ev, _, ok, msg = _newton(p, np.zeros(p.n), hi, opts.tol, 100)
            if not ok:
                raise ValueError(f"branch_from_uniform: no stationary state at nu = hi = {hi:g} from the uniform "
                                 f"guess ({msg})")
            t0 = np.zeros(p.n + 1)
            t0[-1] = -1.0
            X0 = np.concatenate([ev.x, [hi / nu_c]])
            first = tracer.record(X0, ev, tracer.tangent(ev, t0), opts.first_step, -1, 0)
            sides[-1].append(first)
            if callback:
                callback(first)
        if -1 not in stop:
            stop[-1] = tracer.follow(sides[-1], -1, False, callback, stop_request)
            _raise_if_unresolved(stop[-1], tracer, setup)
            if callback and stop[-1][0] != "interrupted":
                callback({"event": "side_end", "side": -1, "reason": stop[-1][0], "message": stop[-1][1]})
        return _assemble(tracer, model, mode, sides, None, stop, nu_c, "imperfect", None, {}, (lo, hi),
                         time.perf_counter() - wall0, events=stop[-1][0] != "interrupted")

    # the uniform state at the threshold, the branch's start on both sides
    ev0 = p.evaluate(np.zeros(p.n), nu_c)
    k = p.mode_index(mode)
    sides = {}
    for side in (+1, -1):
        if any(reason == "interrupted" for reason, _ in stop.values()):
            # an interrupted run ends here; a resume continues from the points written
            stop.setdefault(side, ("interrupted", "not started (interrupted before)"))
            sides.setdefault(side, done.get(side, []))
            continue
        pts = done.get(side, [])
        if not pts:
            t0 = np.zeros(p.n + 1)
            t0[k] = side
            start = tracer.record(np.concatenate([np.zeros(p.n), [1.0]]), ev0, t0, opts.first_step, side, 0)
            start["start"] = start["origin"] = True
            pts = [start]
            if callback:
                callback(start)
        else:
            pts[0]["start"] = pts[0]["origin"] = True
        sides[side] = pts
        if side not in stop:
            stop[side] = tracer.follow(pts, side, True, callback, stop_request)
            _raise_if_unresolved(stop[side], tracer, setup)
            if callback and stop[side][0] != "interrupted":
                callback({"event": "side_end", "side": side, "reason": stop[side][0], "message": stop[side][1]})
    start = sides[+1][0]
    body = {side: pts[1:] for side, pts in sides.items()}
    if any(reason == "interrupted" for reason, _ in stop.values()):
        return _assemble(tracer, model, mode, body, start, stop, nu_c, "", None, {}, (lo, hi),
                         time.perf_counter() - wall0, events=False)
    if any(len(v) == 0 for v in body.values()):
        fit, kind, nf = {}, "", None
    else:
        fit = _fit_normal_form(body, nu_c)
        kind, nf = _judge(fit, nu_c, model.sign)
    return _assemble(tracer, model, mode, body, start, stop, nu_c, kind, nf, fit, (lo, hi),
                     time.perf_counter() - wall0)


def _raise_if_unresolved(stop: tuple, tracer: _Tracer, setup: BranchSetup) -> None:
    if stop[0] == "resolution" and tracer.unresolved is not None and setup.degree < setup.max_degree:
        raise _Unresolved(tracer.unresolved)


@_one_blas_thread
def continue_branch(state: StationaryState, noise_range, *, direction: int = 0, switch: bool = True,
                    max_depth: int = 1, **options) -> Branch:
    """The branch of stationary states through ``state``, by pseudo-arclength continuation in the noise
    within ``noise_range``, with branch switching at the branch points it detects (module Notes).

    Parameters
    ----------
    state : StationaryState
        A converged state (its model, degree and representation are kept).
    noise_range : (lo, hi)
        0 < lo < hi, holding the state's nu.
    direction : {0, +1, -1}
        Follow both ways (0), or only towards larger (+1) / smaller (-1) nu.
    switch : bool
        At each branch point (an eigenvalue of S's own block crossing zero without a fold) follow the other
        branch through it, both ways, into :attr:`Branch.children` (its own children up to ``max_depth``).
        Symmetry-breaking bifurcations (into another block) are reported, not followed: their branches
        live in a larger representation ("full" on S^1, "general" on S^2).
    **options
        :class:`ContinuationOptions`.
    """
    wall0 = time.perf_counter()
    if not isinstance(state, StationaryState):
        raise TypeError(f"continue_branch: state must be a StationaryState, got {type(state).__name__}")
    lo, hi = _check_range(noise_range)
    nu0 = state.noise
    if not (lo <= nu0 <= hi):
        raise ValueError(f"noise_range ({lo:g}, {hi:g}) must contain the state's nu = {nu0:g}")
    if direction not in (0, 1, -1):
        raise ValueError(f"direction must be 0, +1 or -1, got {direction!r}")
    check.integer("max_depth", max_depth, ge=0)
    opts = ContinuationOptions.from_kwargs(options)
    p = _problem(state.model, state.degree, state.representation)
    tracer = _Tracer(p, nu0, opts, None, (lo, hi), p.uniform_free_energy())
    ev, _, ok, msg = _newton(p, state.unknowns, nu0, opts.tol, 50)
    if not ok:
        raise ValueError(f"continue_branch: the state does not converge at its own nu ({msg})")
    X0 = np.concatenate([ev.x, [1.0]])
    t_nu = np.zeros(p.n + 1)
    t_nu[-1] = 1.0
    t0 = tracer.tangent(ev, t_nu)
    sides, stop = {}, {}
    for side in ((+1, -1) if direction == 0 else (direction,)):
        start = tracer.record(X0, ev, side * t0, opts.first_step, side, 0)
        start["start"] = True
        sides[side] = [start]
        stop[side] = tracer.follow(sides[side], side, False)
    branch = _assemble(tracer, state.model, None, sides, None, stop, None, "", None, {}, (lo, hi), 0.0)
    if switch and max_depth > 0:
        for bp in [b for b in branch.bifurcations if b["kind"] == "branch point"]:
            child = _switch(tracer, bp, state, (lo, hi), opts, max_depth - 1)
            if child is not None:
                branch.children.append(child)
    branch.wall_time = time.perf_counter() - wall0
    return branch


def _switch(tracer: _Tracer, bp: dict, state: StationaryState, lo_hi: tuple, opts: ContinuationOptions,
            depth: int) -> Branch | None:
    """The other branch through the branch point ``bp``: the null vector of R_X there orthogonal to the
    followed branch's tangent, followed both ways."""
    p = tracer.p
    X = np.concatenate([bp["x"], [bp["mu"]]])
    ev = p.evaluate(bp["x"], bp["nu"])
    if not p.dense and p.n > DENSE_MAX:
        return None
    RX = np.concatenate([p.jacobian(ev), tracer.nu_ref * p.d_nu(ev)[:, None]], axis=1)
    _, sv, Vt = np.linalg.svd(RX)
    kernel = Vt[-2:]                                   # the two directions R_X nearly annihilates at a branch point
    t_old = bp["t"] / np.linalg.norm(bp["t"])
    cand = kernel - np.outer(kernel @ t_old, t_old)
    phi = cand[int(np.argmax(np.linalg.norm(cand, axis=1)))]
    phi /= np.linalg.norm(phi)
    sub = _Tracer(p, tracer.nu_ref, opts, None, lo_hi, tracer.f_uniform)
    sides, stop = {}, {}
    h = max(10 * opts.first_step, 1e-2)
    for side in (+1, -1):
        d = side * phi
        sol = sub.correct(X + h * d, d, X, h)
        if sol is None:
            stop[side] = ("step", "no point on the new branch at the first step from the branch point")
            continue
        Xn, evn, steps = sol
        rec = sub.record(Xn, evn, sub.tangent(evn, d), h, side, steps)
        rec["start"] = True
        sides[side] = [rec]
        stop[side] = sub.follow(sides[side], side, False)
    if not sides:
        return None
    child = _assemble(sub, state.model, None, sides, None, stop, None, "", None, {}, lo_hi, 0.0, parent_point=bp)
    if depth > 0:
        for b in [b for b in child.bifurcations if b["kind"] == "branch point"
                  and abs(b["nu"] - bp["nu"]) > 1e-6 * bp["nu"]]:
            g = _switch(sub, b, state, lo_hi, opts, depth - 1)
            if g is not None:
                child.children.append(g)
    return child
