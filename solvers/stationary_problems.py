"""The fixed-point problem of a stationary state with noise, discretised (``solvers.stationary``, Notes).

rho = exp(s U[rho] / nu) / Z in the reduced unknowns x (orthonormal coordinates of rho in the kernel's degrees):
on S^1 a dense problem in the Fourier modes (even, or full); on S^2 a dense one in the zonal harmonics, or
Newton–Krylov in all the harmonics (``_Krylov``). Each gives the residual, its Jacobian, the derivative in nu, the
bordered systems of the continuation and the spectra of S that decide stability; :func:`_newton` solves it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh, gmres

from spectral import fourier, sphere
from spectral.multipliers import kernel_bandwidth
from ._blas import blas_threads
from .model import Model

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
    # set by the subclasses: the unknowns, their multipliers g (n,), the potential V on the nodes (or None)
    # and the nodes' quadrature weights
    n: int
    g: np.ndarray
    V: np.ndarray | None
    wq: np.ndarray

    def __init__(self, model: Model, degree: int, La: int) -> None:
        self.model, self.degree, self.La = model, int(degree), int(La)
        self.s = model.sign
        self.gamma = model.strength
        g_all = model.energy_multipliers(max(self.La, 1))
        self.g0 = float(g_all[0])
        self._g_all = g_all

    def mode_index(self, mode: int) -> int:
        raise NotImplementedError

    # --- what each representation provides ------------------------------------------------------------------
    def evaluate(self, x: np.ndarray, nu: float) -> _Eval:
        raise NotImplementedError

    def jacobian(self, ev: _Eval) -> np.ndarray:
        raise NotImplementedError

    def d_nu(self, ev: _Eval) -> np.ndarray:
        raise NotImplementedError

    def solve(self, ev: _Eval, rhs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def bordered(self, ev: _Eval, nu_ref: float, t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def spectra(self, ev: _Eval) -> dict:
        raise NotImplementedError

    def from_coefficients(self, c: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def coefficients(self, ev: _Eval) -> np.ndarray:
        raise NotImplementedError

    def grid_values(self, c: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def projection(self, c: np.ndarray, mode: int) -> float:
        raise NotImplementedError

    @staticmethod
    def amplitude(c: np.ndarray, mode: int) -> float:
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


class _SphereModes:
    """The mode measures of the S^2 problems (canonical layout): the zonal coefficient c_l0 of degree ``mode``,
    and the rotation-invariant size of its degree."""

    @staticmethod
    def projection(c: np.ndarray, mode: int) -> float:
        return float(np.real(c[mode * (mode + 1) // 2]))

    @staticmethod
    def amplitude(c: np.ndarray, mode: int) -> float:
        return _sphere_amplitude(c, mode)


class _ZonalProblem(_SphereModes, _Dense):
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


def _sphere_amplitude(c: np.ndarray, l: int) -> float:
    """sqrt(sum_m mult |c_lm|^2), canonical layout: the rotation-invariant size of degree l's coefficients
    (|c_l0| for a zonal state)."""
    c = np.asarray(c)
    seg = c[l * (l + 1) // 2: (l + 1) * (l + 2) // 2]
    return float(math.sqrt(abs(seg[0]) ** 2 + 2.0 * float(np.sum(np.abs(seg[1:]) ** 2))))


def _is_zonal_potential(model: Model) -> bool:
    p = model.perceptron
    return p is None or bool(np.all(np.abs(np.asarray(p.to_dict()["a"])[:, :2]) <= 1e-14))


class _Krylov(_SphereModes, _Problem):
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
