"""A proven lower bound on the minimum of a function over the whole sphere S^{d-1}: branch and bound on the
cells of the cube sphere, from values, gradients and a bound on the curvature along great circles.

The cube sphere: each x in S^{d-1} has a largest coordinate |x_a|, and x / |x_a| lies on the face
{p : p_a = +-1, |p_j| <= 1} of the cube [-1, 1]^d; a cell of a face is a box u_c +- h (u the d - 1 other
coordinates), and its points on the sphere are p / |p| for p in the box (the gnomonic image). The 2 d faces
cover the sphere, and so do the cells of each level, every cell being split into 2^{d-1} halves.

The cell's radius. The points within angle r of the centre x_c form the convex cone {p : <p, x_c> >= cos(r)
|p|} (r < pi / 2), so the box lies in it as soon as its 2^{d-1} corners do: the largest angle from x_c to a
corner bounds the angle to every point of the cell.

The bound. Let f be C^1 on the sphere with f'' >= -kappa along every unit-speed great circle (almost
everywhere, f' absolutely continuous), x in the cell and x(s) the minimising great circle from x_c to x, of
length rho <= r. Taylor's formula with integral remainder gives

    f(x) >= f(x_c) + s'(0) . grad f(x_c) rho - kappa rho^2 / 2 >= f(x_c) - |grad f(x_c)| r - kappa r^2 / 2,

the cell's lower bound LB (less ``error``, a bound on the round-off of f and |grad f| at the centre). A cell
whose LB is within ``tol`` of the smallest value found, U, is split; the others are discarded, and the
smallest LB over the discarded cells (and over those left when the budget runs out) is a lower bound on
min f over the sphere. Near an isolated minimum with Hessian H the cells kept at a level have radius r and
lie within O(r sqrt(kappa / H)) of it, so the cost is O(log(r_0 / r_tol)) levels of a bounded number of
cells, r_tol ~ sqrt(2 tol / (H + kappa)).

The second-order bound. Where f is C^3 within the cell (for a ReLU potential: no kink crosses it) and its
third derivative along unit-speed great circles is at most M, f(exp_c(delta)) >= f(c) + g . delta +
delta^T H delta / 2 - M |delta|^3 / 6 with H the covariant Hessian at the centre; its minimum over |delta|
<= r is bounded below in the eigenbasis of H, where the ball lies in a box and the minimum separates
(:func:`_quadratic_floor`). The larger of the two bounds is the cell's; near a minimum this one decides
cells of radius (tol / M)^{1/3}, and along a valley of minima (a ring) it keeps the count of cells down.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .atomic import tangent_frames

__all__ = ["SphereMinimum", "certified_minimum", "cube_sphere_points", "newton_minimum"]

#: cells evaluated at most by one call (a bound on its time and memory; the bound stays valid when it is hit)
MAX_CELLS = 4_000_000
#: levels at most below the first (h halves at each)
MAX_LEVELS = 60


@dataclass
class SphereMinimum:
    """The result of :func:`certified_minimum`.

    lower : a proven lower bound on min f over the sphere (round-off included).
    upper : the smallest value of f found (at ``argmin``), an upper bound on min f up to round-off.
    argmin : the point (d,) of ``upper``.
    evaluations, levels : cells evaluated and levels of refinement used.
    finished : False when the budget ran out before every cell was decided (``lower`` is still proven,
        only looser).
    below : points (n, d) evaluated with f < ``collect_below`` (for an exchange method), values ``below_f``.
    """

    lower: float
    upper: float
    argmin: np.ndarray
    evaluations: int
    levels: int
    finished: bool
    below: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    below_f: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _faces(d: int) -> list[tuple[int, float]]:
    return [(a, s) for a in range(d) for s in (1.0, -1.0)]


def _to_points(axis: np.ndarray, sign: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Unit vectors (n, d) of face coordinates u (n, d - 1) on faces (axis, sign)."""
    n, m = u.shape
    d = m + 1
    p = np.empty((n, d))
    for a in range(d):
        on = axis == a
        if not on.any():
            continue
        cols = [j for j in range(d) if j != a]
        p[np.ix_(on, cols)] = u[on]
        p[on, a] = sign[on]
    return p / np.linalg.norm(p, axis=1, keepdims=True)


def _initial_cells(d: int, n0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    h = 1.0 / n0
    ticks = -1.0 + (2.0 * np.arange(n0) + 1.0) * h
    grid = np.array(list(itertools.product(ticks, repeat=d - 1))).reshape(-1, d - 1)
    axis, sign, u = [], [], []
    for a, s in _faces(d):
        axis.append(np.full(len(grid), a))
        sign.append(np.full(len(grid), s))
        u.append(grid)
    return np.concatenate(axis), np.concatenate(sign), np.concatenate(u), h


def cube_sphere_points(d: int, spacing: float) -> np.ndarray:
    """The centres (n, d) of the first level's cells for a target spacing (radians): 2 d n0^{d-1} points,
    n0 = ceil(2 / spacing) cells per face and axis (neighbours at most ``spacing`` apart)."""
    n0 = max(1, math.ceil(2.0 / spacing))
    axis, sign, u, _ = _initial_cells(d, n0)
    return _to_points(axis, sign, u)


def _radii(axis, sign, u, x, h: float) -> np.ndarray:
    """The largest angle from each centre x to its cell's corners, widened for round-off."""
    m = u.shape[1]
    r = np.zeros(len(u))
    for corner in itertools.product((-1.0, 1.0), repeat=m):
        xc = _to_points(axis, sign, u + h * np.asarray(corner))
        chord = np.linalg.norm(xc - x, axis=1)
        r = np.maximum(r, 2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0)))
    return r * (1.0 + 1e-12) + 1e-15


def _quadratic_floor(g: np.ndarray, H: np.ndarray, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """A lower bound on min over |delta| <= r (delta tangent at x) of g . delta + delta^T H delta / 2: in the
    eigenbasis of H on T_x the ball lies in the box |delta_i| <= r, where the minimum separates into exact
    one-dimensional minima (-g_i^2 / (2 l_i) inside, else -|g_i| r + l_i r^2 / 2)."""
    E = tangent_frames(x)
    lam, vec = np.linalg.eigh(np.einsum("ndp,nde,neq->npq", E, H, E))
    gi = np.abs(np.einsum("npq,ndp,nd->nq", vec, E, g))
    rr = r[:, None]
    inside = (lam > 0) & (gi <= lam * rr)
    edge = -gi * rr + 0.5 * lam * rr * rr
    val = np.where(inside, -gi * gi / (2.0 * np.where(lam > 0, lam, 1.0)), edge)
    return val.sum(axis=1)


def certified_minimum(func: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], d: int, kappa: float, *,
                      tol: float, spacing: float, error: tuple[float, float, float],
                      candidates: np.ndarray | None = None, collect_below: float | None = None,
                      hessian: Callable[[np.ndarray], np.ndarray] | None = None, third: float | None = None,
                      smooth: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                      max_cells: int = MAX_CELLS, batch: int = 200_000) -> SphereMinimum:
    """A proven lower bound on min f over S^{d-1} (module docstring).

    Parameters
    ----------
    func : callable
        x (n, d) unit vectors -> (f (n,), tangent gradient (n, d)).
    kappa : float
        >= 0 with f'' >= -kappa along every unit-speed great circle.
    tol : float
        Cells are split while their bound is below (smallest value found) - tol: the returned ``lower`` is
        then within tol (plus the round-off) of the smallest value found, if the budget allows.
    spacing : float
        The first level's cell size (radians), see :func:`cube_sphere_points`.
    error : (e0, e1, e2)
        Bounds on the round-off at one point of f, of |grad f| and of the Hessian's norm.
    candidates : array (k, d), optional
        Points evaluated first (known near-minima), which set the first upper bound.
    collect_below : float, optional
        Return the evaluated centres with f below this (``below``).
    hessian, third, smooth : optional
        The second-order bound: ``hessian(x)`` the covariant Hessian (n, d, d) at x, ``third`` a bound on
        the third derivative of f along unit-speed great circles within the cells where ``smooth(x, r)`` is
        True (default: everywhere). There f(exp_x(delta)) >= f(x) + g . delta + delta^T H delta / 2 -
        third |delta|^3 / 6, whose minimum over |delta| <= r (:func:`_quadratic_floor`) improves the bound
        near minima: the cells it decides there have radius (tol / third)^{1/3} instead of (tol / kappa)^{1/2}.
    """
    kappa = max(0.0, float(kappa))
    e0, e1, e2 = (float(e) for e in error)
    upper, argmin = math.inf, None
    if candidates is not None and len(candidates):
        fc, _ = func(np.asarray(candidates, dtype=float))
        j = int(np.argmin(fc))
        upper, argmin = float(fc[j]), np.asarray(candidates[j], dtype=float)
    n0 = max(1, math.ceil(2.0 / spacing))
    axis, sign, u, h = _initial_cells(d, n0)
    lower = math.inf
    evaluations, level = 0, 0
    below, below_f = [], []
    finished = True
    while len(u):
        x = _to_points(axis, sign, u)
        f = np.empty(len(u))
        gv = np.empty((len(u), d))
        for s in range(0, len(u), batch):
            f[s:s + batch], gv[s:s + batch] = func(x[s:s + batch])
        g = np.linalg.norm(gv, axis=1)
        evaluations += len(u)
        j = int(np.argmin(f))
        if f[j] < upper:
            upper, argmin = float(f[j]), x[j].copy()
        if collect_below is not None:
            sel = f < collect_below
            below.append(x[sel])
            below_f.append(f[sel])
        r = _radii(axis, sign, u, x, h)
        lb = f - (g + e1) * r - 0.5 * kappa * r * r - e0
        split = lb < upper - tol
        if hessian is not None and third is not None and split.any():
            idx = np.nonzero(split)[0]
            if smooth is not None:
                idx = idx[smooth(x[idx], r[idx])]
            if len(idx):
                ri = r[idx]
                q = _quadratic_floor(gv[idx], hessian(x[idx]), x[idx], ri)
                lb2 = f[idx] + q - third * ri ** 3 / 6.0 - e0 - e1 * ri - 0.5 * e2 * ri * ri
                lb[idx] = np.maximum(lb[idx], lb2)
                split = lb < upper - tol
        if np.any(~split):
            lower = min(lower, float(lb[~split].min()))
        if not split.any():
            break
        if level >= MAX_LEVELS or evaluations + 2 ** (d - 1) * int(split.sum()) > max_cells:
            lower = min(lower, float(lb[split].min()))
            finished = False
            break
        axis, sign, u = axis[split], sign[split], u[split]
        h /= 2.0
        offsets = np.array(list(itertools.product((-h, h), repeat=d - 1)))
        u = (u[:, None, :] + offsets[None, :, :]).reshape(-1, d - 1)
        axis = np.repeat(axis, len(offsets))
        sign = np.repeat(sign, len(offsets))
        level += 1
    if collect_below is not None and below:
        bx, bf = np.concatenate(below), np.concatenate(below_f)
    else:
        bx, bf = np.zeros((0, d)), np.zeros(0)
    return SphereMinimum(lower=lower, upper=upper, argmin=argmin, evaluations=evaluations, levels=level,
                         finished=finished, below=bx, below_f=bf)


def newton_minimum(func_hess: Callable, x0: np.ndarray, *, max_iter: int = 50, tol: float = 1e-15,
                   max_step: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Riemannian Newton's method for local minima of f on the sphere from the points x0 (n, d), all at once.

    ``func_hess(x)`` returns (f (n,), tangent gradient (n, d), covariant Hessian (n, d, d) on the tangent
    space). Each step solves Hess delta = -grad on T_x (a Hessian that is not positive definite there is
    replaced by |Hess| + its largest eigenvalue's 1e-8, so the step still descends), caps it at
    ``max_step`` radians, and is kept only where f decreases (else halved, up to 30 times); the retraction is
    x <- (x + delta) / |x + delta|. Stops when every |grad| <= tol or after ``max_iter`` steps.

    Returns (x (n, d), f (n,)).
    """
    x = np.array(x0, dtype=float, ndmin=2)
    f, g, H = func_hess(x)
    for _ in range(max_iter):
        gn = np.linalg.norm(g, axis=1)
        if np.all(gn <= tol):
            break
        E = tangent_frames(x)
        lam, vec = np.linalg.eigh(np.einsum("ndp,nde,neq->npq", E, H, E))
        scale = np.max(np.abs(lam), axis=1, keepdims=True) + 1e-300
        inv = 1.0 / np.maximum(np.abs(lam), 1e-8 * scale)
        gt = np.einsum("ndp,nd->np", E, g)
        yt = -np.einsum("npq,nq,nrq,nr->np", vec, inv, vec, gt)
        step = np.einsum("ndp,np->nd", E, yt)
        length = np.linalg.norm(step, axis=1)
        step *= np.minimum(1.0, max_step / np.maximum(length, 1e-300))[:, None]
        alpha = np.ones(len(x))
        todo = gn > tol
        xn = x.copy()
        for _ in range(30):
            trial = x[todo] + alpha[todo, None] * step[todo]
            trial /= np.linalg.norm(trial, axis=1, keepdims=True)
            ft, _, _ = func_hess(trial)
            ok = ft <= f[todo]
            idx = np.nonzero(todo)[0]
            xn[idx[ok]] = trial[ok]
            alpha[idx[~ok]] *= 0.5
            todo[idx[ok]] = False
            if not todo.any():
                break
        if np.array_equal(xn, x):
            break
        x = xn
        f, g, H = func_hess(x)
    return x, f
