"""The descent minimiser as atoms: an exchange method on a grid, then Newton's method for the atoms' positions
and masses together, then the certificate of :mod:`solvers.landscape_bound` (the derivation is in
:mod:`solvers.landscape`).

The discrete problem. For points X = (x_1..x_n) the energy of sum_i w_i delta_{x_i} is, on the simplex
(w >= 0, sum w = 1),

    E(w) = gamma g(1) / 2 + w^T A w / 2 + v^T w,    A_ij = gamma (g(<x_i, x_j>) - g(1)),  v_i = V(x_i),

a convex quadratic program (A is positive definite on sum w = 0 for distinct points: the kernel's
Funk-Hecke multipliers are positive). Its KKT conditions say Phi(x_i) = lambda where w_i > 0 and
Phi(x_i) >= lambda elsewhere: the grid version of the certificate's condition. :func:`simplex_qp` solves it
by a primal active-set method; :func:`exchange` adds the grid points where Phi is lowest until no grid
point is below lambda.

Off the grid, two Newton methods. :func:`slide` minimises E over the atoms' positions and masses together
(masses on the simplex), in the charts X_i = (x_i + E_i xi_i) / |.| (E_i an orthonormal basis of T_{x_i}),
from the exact Hessian of E with its eigenvalues made positive and a line search on E: the globalisation,
during which atoms that meet merge and atoms whose mass vanishes leave. :func:`newton_atoms` then solves the
optimality conditions

    Phi(x_i) = lambda,   grad Phi(x_i) = 0 (on T_{x_i}),   sum_i w_i = 1,

k d + 1 equations in the k (d - 1) tangent moves, the k masses and lambda, to round-off. In both the position
block is the reduced Jacobian of :func:`solvers.atomic.reduced_jacobian` (grad Phi(x_i) = s v(x_i)), and the
others are dPhi(x_i)/dw_j = gamma (g(<x_i, x_j>) - g(1)), d grad Phi(x_i)/dw_j = gamma K_ij E_i^T x_j and
dPhi(x_i)/dx_j = gamma w_j K_ij E_j^T x_i (j != i; j = i gives grad Phi(x_i)), K = exp(beta(<x_i, x_j> - 1));
the Hessian of E has the rows of the positions multiplied by w_i (dE/dx_i = w_i grad Phi(x_i)) and, at
(x_i, w_i), the extra term grad Phi(x_i).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from .atomic import reduced_jacobian, tangent_frames
from .atoms import single_linkage_clusters
from .model import Model

__all__ = ["qp_data", "simplex_qp", "exchange", "merge_atoms", "slide", "newton_atoms", "NewtonAtoms"]


def qp_data(model: Model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (n, n) and v (n,) of the discrete problem at the points x (module docstring)."""
    A = (model.strength * model.energy_kernel(x @ x.T, relative=True)
         if model.attention != "none" else np.zeros((len(x), len(x))))
    v = model.potential(x) if model.perceptron is not None else np.zeros(len(x))
    return A, v


def simplex_qp(A: np.ndarray, v: np.ndarray, w0: np.ndarray | None = None, tol: float = 1e-15,
               max_iter: int | None = None) -> np.ndarray:
    """argmin w^T A w / 2 + v^T w over the simplex (A positive definite on sum w = 0), by a primal active-set
    method from the feasible ``w0`` (default: the best vertex). Optimal when, with lambda the common value of
    (A w + v)_i on the support, every other (A w + v)_j >= lambda - tol (times the data's scale)."""
    n = len(v)
    if w0 is None:
        w = np.zeros(n)
        w[int(np.argmin(0.5 * np.diag(A) + v))] = 1.0
    else:
        w = np.maximum(np.asarray(w0, dtype=float), 0.0)
        w /= w.sum()
    free = w > 0
    scale = max(float(np.max(np.abs(A))) if n else 0.0, float(np.max(np.abs(v))) if n else 0.0, 1e-300)
    for _ in range(20 * n + 200 if max_iter is None else max_iter):
        idx = np.nonzero(free)[0]
        m = len(idx)
        K = np.zeros((m + 1, m + 1))
        # a ridge of 1e-13 of the data's scale: at beta -> 0 the kernel is t - 1 beyond round-off, A only
        # positive semi-definite on sum w = 0, and the subproblems singular
        K[:m, :m] = A[np.ix_(idx, idx)] + 1e-13 * scale * np.eye(m)
        K[:m, m] = K[m, :m] = 1.0
        rhs = np.concatenate([-v[idx], [1.0]])
        try:
            sol = np.linalg.solve(K, rhs)
        except np.linalg.LinAlgError:
            sol = scipy.linalg.lstsq(K, rhs)[0]
        target = sol[:m]
        if np.all(target >= 0.0):
            w = np.zeros(n)
            w[idx] = target
            grad = A @ w + v
            lam = float(w @ grad)
            viol = np.where(free, np.inf, grad - lam)
            j = int(np.argmin(viol))
            if viol[j] >= -tol * scale:
                return w
            free[j] = True
            continue
        step = target - w[idx]
        neg = step < 0
        ratio = np.full(m, np.inf)
        ratio[neg] = w[idx][neg] / -step[neg]
        t = float(min(1.0, ratio.min()))
        w[idx] = w[idx] + t * step
        out = idx[np.argmin(ratio)]
        w[out] = 0.0
        w[w < 0] = 0.0
        free = w > 0
        w /= w.sum()
    return w


def exchange(model: Model, pool: np.ndarray, x: np.ndarray, w: np.ndarray, *, tol: float, radius: float,
             per_round: int = 16, max_rounds: int = 500) -> tuple[np.ndarray, np.ndarray, int]:
    """Grow the support from ``pool`` (grid points): while some pool point has Phi below lambda - tol, add
    the lowest ones (at most ``per_round``, ``radius`` apart) and re-solve :func:`simplex_qp` on the support
    and the added points; drop points of zero mass. Returns (x, w, rounds)."""
    energy = math.inf
    for rounds in range(max_rounds):
        phi_pool, _ = model.first_variation_direct(pool, x, w)
        phi_x, _ = model.first_variation_direct(x, x, w)
        lam = float(w @ phi_x)
        bad = np.nonzero(phi_pool < lam - tol)[0]
        now = _energy(model, x, w)
        if len(bad) == 0 or now >= energy - tol:            # done, or no progress left in floating point
            return x, w, rounds
        energy = now
        bad = bad[np.argsort(phi_pool[bad])]
        chosen: list = []
        for j in bad:
            if all(np.linalg.norm(pool[j] - pool[i]) > radius for i in chosen):
                chosen.append(j)
                if len(chosen) >= per_round:
                    break
        xs = np.concatenate([x, pool[chosen]])
        A, v = qp_data(model, xs)
        w = simplex_qp(A, v, np.concatenate([w, np.zeros(len(chosen))]))
        keep = w > 0
        x, w = xs[keep], w[keep] / w[keep].sum()
    return x, w, max_rounds


def merge_atoms(x: np.ndarray, w: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Single-linkage groups of the atoms at ``radius`` (radians), each one atom at its mass-weighted mean."""
    centres, masses, _ = single_linkage_clusters(x, w, radius)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True), masses / masses.sum()


def _energy(model: Model, x: np.ndarray, w: np.ndarray) -> float:
    A, v = qp_data(model, x)
    return float(0.5 * w @ A @ w + v @ w)


def _hessian(model: Model, x: np.ndarray, w: np.ndarray, E: np.ndarray, rg: np.ndarray):
    """The Hessian of E(X, w) (less its constant) in the charts X_i = (x_i + E_i xi_i) / |.| and the masses,
    symmetrised: blocks w_i d rg_i / d xi_j, d (w_i rg_i) / d w_j, gamma (g(<x_i, x_j>) - g(1))."""
    k, d = x.shape
    n = d - 1
    gamma = model.strength if model.attention != "none" else 0.0
    t = x @ x.T
    K = model.kernel(t)
    Ex = np.einsum("idn,jd->ijn", E, x)
    H = np.zeros((k * n + k, k * n + k))
    H[:k * n, :k * n] = np.repeat(w, n)[:, None] * (model.sign * reduced_jacobian(model, x, w / w.sum())[0])
    Hxw = (w[:, None, None] * gamma * K[:, :, None] * Ex).transpose(0, 2, 1).reshape(k * n, k)
    Hxw[np.arange(k * n), np.repeat(np.arange(k), n)] += rg.reshape(-1)
    H[:k * n, k * n:] = Hxw
    H[k * n:, :k * n] = Hxw.T
    H[k * n:, k * n:] = gamma * model.energy_kernel(t, relative=True)
    return 0.5 * (H + H.T)


def slide(model: Model, x: np.ndarray, w: np.ndarray, *, tol: float, max_iter: int = 300,
          merge: float = 1e-7, max_step: float = 0.1, stall: float = 1e-15) -> tuple[np.ndarray, np.ndarray, int]:
    """Minimise E over the atoms' positions and masses together (masses on the simplex), from (x, w).

    Newton's method on the Hessian of E restricted to sum w = 0 (:func:`_hessian`), its eigenvalues replaced
    by their absolute values with a floor of 1e-10 of the largest (so each step descends), with an Armijo
    line search on E, steps capped at ``max_step`` radians and at the first mass that reaches 0 (that atom
    is dropped), and atoms closer than ``merge`` radians merged. Stops when Phi(x_i) is within ``tol`` of its
    mean and every |grad Phi(x_i)| w_i <= tol, or when the decrease the step predicts is below ``stall``
    times |E| + 1 (the energy's round-off), or when the line search finds no decrease.
    Returns (x, w, iterations)."""
    x = np.array(x, dtype=float)
    w = np.array(w, dtype=float)
    it = 0
    for it in range(max_iter):
        if len(x) > 1:
            x, w = merge_atoms(x, w, merge)
        k, d = x.shape
        n = d - 1
        phi, grad = model.first_variation_direct(x, x, w)
        E = tangent_frames(x)
        rg = np.einsum("idn,id->in", E, grad)
        lam = float(w @ phi)
        if max(float(np.max(np.abs(phi - lam))), float(np.max(np.abs(w[:, None] * rg)))) <= tol:
            break
        H = _hessian(model, x, w, E, rg)
        g = np.concatenate([(w[:, None] * rg).reshape(-1), phi])
        Zw = scipy.linalg.null_space(np.ones((1, k)))
        Z = scipy.linalg.block_diag(np.eye(k * n), Zw)
        lam_e, V = np.linalg.eigh(Z.T @ H @ Z)
        floor = 1e-10 * max(float(np.max(np.abs(lam_e))), 1e-300)
        gr = Z.T @ g
        p = -Z @ (V @ ((V.T @ gr) / np.maximum(np.abs(lam_e), floor)))
        dxi, dw = p[:k * n].reshape(k, n), p[k * n:]
        move = np.einsum("idn,in->id", E, dxi)
        longest = float(np.max(np.linalg.norm(move, axis=1)))
        alpha = min(1.0, max_step / max(longest, 1e-300))
        shrink = dw < 0
        block = None
        if shrink.any():
            ratios = np.where(shrink, w / np.where(shrink, -dw, 1.0), np.inf)
            j = int(np.argmin(ratios))
            if ratios[j] <= alpha:
                alpha, block = float(ratios[j]), j
        e0 = _energy(model, x, w)
        slope = float(g @ p)
        if -slope <= stall * (abs(e0) + 1.0):
            break                     # the decrease left is below the energy's round-off: Newton's polish takes over
        accepted = False
        for _ in range(40):
            xn = x + alpha * move
            xn /= np.linalg.norm(xn, axis=1, keepdims=True)
            wn = w + alpha * dw
            if block is not None:
                wn[block] = 0.0
            wn = np.maximum(wn, 0.0)
            if _energy(model, xn, wn) <= e0 + 1e-4 * alpha * slope:
                accepted = True
                break
            alpha *= 0.5
            block = None
        if not accepted:
            break
        keep = wn > 0
        x, w = xn[keep], wn[keep] / wn[keep].sum()
    return x, w, it


class NewtonAtoms:
    """The result of :func:`newton_atoms`: positions x, masses w, the level lambda, the final residual
    (max of |Phi(x_i) - lambda| and |grad Phi(x_i)|), iterations, and ``dropped``: the index of an atom
    whose mass the Newton step drives below zero (the support is too large; None otherwise)."""

    def __init__(self, x, w, lam, residual, iterations, dropped, converged):
        self.x, self.w, self.lam, self.residual = x, w, lam, residual
        self.iterations, self.dropped, self.converged = iterations, dropped, converged


def _residual(model: Model, x: np.ndarray, w: np.ndarray, lam: float):
    phi, grad = model.first_variation_direct(x, x, w)
    E = tangent_frames(x)
    rg = np.einsum("idn,id->in", E, grad)
    return np.concatenate([phi - lam, rg.reshape(-1), [w.sum() - 1.0]]), phi, E, rg


def newton_atoms(model: Model, x: np.ndarray, w: np.ndarray, *, tol: float, max_iter: int = 40,
                 max_step: float = 0.05) -> NewtonAtoms:
    """Newton's method for the atoms' positions, masses and the level together (module docstring), with a
    backtracking line search on the residual's norm and steps capped at ``max_step`` radians. The iterate
    returned is the last accepted one, whose residual is the smallest."""
    x = np.array(x, dtype=float)
    w = np.array(w, dtype=float)
    k, d = x.shape
    n = d - 1
    gamma = model.strength if model.attention != "none" else 0.0
    phi, _ = model.first_variation_direct(x, x, w)
    lam = float(w @ phi)
    r, phi, E, rg = _residual(model, x, w, lam)
    for it in range(max_iter):
        res = float(np.max(np.abs(r)))
        if res <= tol:
            return NewtonAtoms(x, w, lam, res, it, None, True)
        t = x @ x.T
        K = model.kernel(t)
        Gt = model.energy_kernel(t, relative=True)
        Ex = np.einsum("idn,jd->ijn", E, x)                 # E_i^T x_j
        N = k * n + k + 1
        J = np.zeros((N, N))
        Jpx = gamma * (w[None, :, None] * K[:, :, None]) * Ex.transpose(1, 0, 2)   # (i, j, n): w_j K_ij E_j^T x_i
        Jpx[np.arange(k), np.arange(k)] = rg
        J[:k, :k * n] = Jpx.reshape(k, k * n)
        J[:k, k * n:k * n + k] = gamma * Gt
        J[:k, -1] = -1.0
        J[k:k + k * n, :k * n] = model.sign * reduced_jacobian(model, x, w / w.sum())[0]
        J[k:k + k * n, k * n:k * n + k] = (gamma * K[:, :, None] * Ex).transpose(0, 2, 1).reshape(k * n, k)
        J[-1, k * n:k * n + k] = 1.0
        # rows in the order [Phi, grad, sum]: the residual is [Phi - lam, grad, sum - 1]
        # least squares, singular values below 1e-12 of the largest dropped: a ring of atoms around an axis of
        # (local) symmetry turns with next to no change, and that direction is left alone
        delta = scipy.linalg.lstsq(J, -r, cond=1e-12)[0]
        dxi = delta[:k * n].reshape(k, n)
        dw = delta[k * n:k * n + k]
        dlam = float(delta[-1])
        if np.any(w + dw <= 0.0):
            j = int(np.argmin((w + dw) / np.maximum(w, 1e-300)))
            return NewtonAtoms(x, w, lam, res, it, j, False)
        move = np.einsum("idn,in->id", E, dxi)
        longest = float(np.max(np.linalg.norm(move, axis=1)))
        alpha = min(1.0, max_step / max(longest, 1e-300))
        norm0 = float(np.linalg.norm(r))
        for _ in range(40):
            xn = x + alpha * move
            xn /= np.linalg.norm(xn, axis=1, keepdims=True)
            wn = w + alpha * dw
            if np.all(wn > 0):
                rn, phin, En, rgn = _residual(model, xn, wn, lam + alpha * dlam)
                if np.linalg.norm(rn) <= (1.0 - 1e-4 * alpha) * norm0:
                    break
            alpha *= 0.5
        else:
            return NewtonAtoms(x, w, lam, res, it, None, False)
        x, w, lam = xn, wn, lam + alpha * dlam
        r, phi, E, rg = rn, phin, En, rgn
    res = float(np.max(np.abs(r)))
    return NewtonAtoms(x, w, lam, res, max_iter, None, res <= tol)


