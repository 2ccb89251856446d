"""The balance of the forces at the atoms of mu = sum_i m_i delta_{x_i}, and Newton's method for it.

An atomic measure is stationary when every atom is at rest, v[mu](x_i) = 0 (:mod:`solvers.atomic`). In
floating point "at rest" must be measured against something: the velocity at an atom is a sum of forces
(each other atom's attention, each perceptron unit's drift), and an atom is *balanced* when those forces
cancel, |v(x_i)| <= rtol S_i with S_i the sum of their sizes (:func:`force_scales`). A small speed alone
is not a balance: an atom in a ReLU dead zone pulled by one far atom through e^{-beta (1 - cos theta)}
moves at 1e-14 with nothing opposing it. :func:`polish_atoms` solves v(x_i) = 0 by Newton's method on
the reduced system (the atoms moved rigidly, masses fixed; :func:`solvers.atomic.reduced_jacobian`),
each atom's equation scaled by its own S_i, and accepts the result only when it is balanced and Newton's
method converged quadratically there (a singular Jacobian, the mark of a slow rather than a balanced
state, converges at best linearly).

Units: positions are unit vectors, displacements in radians, velocities and force scales in radians per
unit time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from .atomic import _checked, _parts, _reduced_from, arc_lengths, neutral_directions
from .model import Model

__all__ = ["force_scales", "balanced", "polish_atoms", "PolishInfo", "ROUND_OFF_BALANCE", "QUADRATIC_CONTRACTION"]


def force_scales(model: Model, positions, masses) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The size of the forces that make the velocity at each atom of mu = sum_j m_j delta_{x_j}.

    S_i = sum_{j != i} |a_ij| + sum_u |sigma(<a_u, x_i> + b_u)| |W_u|, a_ij = gamma m_j K(x_i, x_j) x_j (USA),
    m_j e^{beta <x_i, x_j>} x_j / Psi_i (SA): each atom's attention and each unit's drift at x_i before the
    tangent projection. The projection is where a term's round-off lives (P_x y = y - <x, y> x to ~1e-16 |y|),
    so |v(x_i)| <= 1e-9 S_i says that the forces cancel to nine digits of their own size: a balance that an
    absolute speed cannot tell from a slow drift.

    Returns
    -------
    S : ndarray (k,)
        1 / unit time (radians per unit time).
    dead : ndarray (k,) of bool
        No perceptron unit acts at x_i (every sigma is exactly zero: a ReLU dead zone); False without a
        perceptron.
    underflow : ndarray (k,) of bool
        Every term at x_i is exactly zero although some is not mathematically (attention between distinct
        atoms with beta (1 - <x_i, x_j>) past the exponent range): the balance there is only that of the
        floating-point range.
    """
    x, m = _checked(model, positions, masses)
    k = x.shape[0]
    S = np.zeros(k)
    partner = np.zeros(k, dtype=bool)
    if model.attention != "none" and k > 1:
        t = np.clip(x @ x.T, -1.0, 1.0)
        K = model.kernel(t) * m[None, :]
        if model.attention == "normalized":
            K = K / (m + (K.sum(axis=1) - np.diag(K)))[:, None]
        else:
            K = model.strength * K
        np.fill_diagonal(K, 0.0)
        S += K.sum(axis=1)
        partner[:] = True
    dead = np.zeros(k, dtype=bool)
    p = model.perceptron
    if p is not None:
        unit = p.unit_forces(x)
        S += unit.sum(axis=1)
        dead = ~np.any(unit > 0.0, axis=1)
    underflow = partner & (S == 0.0)
    return S, dead, underflow


#: a scaled residual max_i |v(x_i)| / S_i at or below this is at the round-off of the forces' sums
ROUND_OFF_BALANCE = 1e-12
#: a Newton step that shrinks the scaled residual by at least this factor converges faster than linearly
QUADRATIC_CONTRACTION = 0.1


@dataclass
class PolishInfo:
    """How :func:`polish_atoms` ended.

    Attributes
    ----------
    converged : bool
        Every atom balanced (|v(x_i)| <= rtol S_i and <= tol) after at least ``min_iter`` Newton steps, with
        Newton's method converging quadratically: its last step shrank the scaled residual
        max_i |v(x_i)| / S_i by at least ``QUADRATIC_CONTRACTION``, or brought it to the round-off of the
        forces (``ROUND_OFF_BALANCE``). A singular Jacobian (a slow, unbalanced state) converges at best
        linearly and fails this.
    iterations : int
        Newton steps taken.
    max_speed, initial_max_speed : float
        max_i |v(x_i)| at the returned and at the given positions (radians per unit time).
    displacement : ndarray (k,)
        Geodesic distance (radians) of each returned atom from its given position.
    message : str
        What happened, one line.
    speeds : list of float
        max_i |v(x_i)| after each step (the first entry: at the start).
    residuals, scales : ndarray (k,)
        |v(x_i)| and the force scale S_i (:func:`force_scales`) at the returned positions.
    initial_residuals, initial_scales : ndarray (k,)
        The same at the given positions.
    dead, underflow : ndarray (k,) of bool
        At the returned positions (:func:`force_scales`).
    balance : list of float
        The scaled residual max_i |v(x_i)| / S_i (atoms with S_i > 0) after each step.
    """

    converged: bool
    iterations: int
    max_speed: float
    initial_max_speed: float
    displacement: np.ndarray
    message: str
    speeds: list = field(default_factory=list)
    residuals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scales: np.ndarray = field(default_factory=lambda: np.zeros(0))
    initial_residuals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    initial_scales: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    underflow: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    balance: list = field(default_factory=list)

    @property
    def max_displacement(self) -> float:
        return float(self.displacement.max(initial=0.0))


def balanced(residuals: np.ndarray, scales: np.ndarray, tol: float, rtol: float) -> np.ndarray:
    """Which atoms are balanced: |v(x_i)| <= rtol S_i and |v(x_i)| <= tol (an atom on which no force acts,
    S_i = 0, only with v = 0)."""
    return (residuals <= rtol * scales) & (residuals <= tol)


def scaled_residual(residuals: np.ndarray, scales: np.ndarray) -> float:
    """max_i |v(x_i)| / S_i over the atoms some force acts on (0 if none)."""
    on = scales > 0.0
    return float(np.max(residuals[on] / scales[on])) if np.any(on) else 0.0


def polish_atoms(model: Model, positions, masses, tol: float = 1e-10, *, rtol: float = 1e-9, max_iter: int = 50,
                 min_iter: int = 1, max_step: float = 0.5, rcond: float = 1e-12, max_halvings: int = 40,
                 max_displacement=None) -> tuple[np.ndarray, PolishInfo]:
    """Solve v[mu_X](x_i) = 0 for every atom (masses fixed) by Newton's method on the reduced system, to a
    balance of the forces.

    Each step: the residual r_i = E_i^T v(x_i) / S_i in the frames, each atom's equation scaled by its force
    scale S_i at the start (:func:`force_scales`: an atom held by forces of 1e-14 is solved to their own
    precision, not to the others'), the reduced Jacobian J (part (a)) scaled alike, the neutral
    (rotation-orbit) directions N left out of the unknowns (they make J singular at the solution and nearly
    so around it), the least-squares minimum-norm step delta = Q y, y = argmin |J Q y + r| (Q an orthonormal
    basis of N's complement; singular values below ``rcond`` times the largest dropped), each atom's tangent
    step E_i delta_i capped at ``max_step`` radians, then a backtracking line search on the Euclidean norm of
    the scaled velocities (Armijo, factor 1/2, at most ``max_halvings`` halvings), and the retraction
    x_i <- (x_i + alpha E_i delta_i) / |.|. Velocities are ``Model.velocity_at_atoms``.

    Parameters
    ----------
    tol, rtol : float
        The balance: every |v(x_i)| <= rtol S_i and <= tol (radians per unit time).
    max_iter, min_iter : int
        Newton steps at most, and at least: a state is accepted only after Newton's method has run on it
        (a zero step proves nothing) and converged quadratically (:class:`PolishInfo`).
    max_displacement : float or array (k,), optional
        Give up (not converged) once an atom is further than this from its given position (radians): a
        caller that accepts only nearby states need not follow Newton's method further.

    Returns
    -------
    positions : ndarray (k, d)
        The last iterate (the one with the smallest scaled residual: the line search only accepts decrease).
    info : PolishInfo
        Never raises on failure: ``converged`` False with the reason, the iterations and the final speed.
    """
    x, m = _checked(model, positions, masses)
    for name, value in (("tol", tol), ("rtol", rtol), ("max_step", max_step)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"polish_atoms: {name} must be finite and > 0, got {value!r}")
    for name, value in (("max_iter", max_iter), ("min_iter", min_iter)):
        if not (isinstance(value, (int, np.integer)) and value >= 0):
            raise ValueError(f"polish_atoms: {name} must be an integer >= 0, got {value!r}")
    x0 = x.copy()
    k, d = x.shape
    n = d - 1

    def speeds_of(v: np.ndarray) -> np.ndarray:
        return np.sqrt(np.einsum("kd,kd->k", v, v))

    S0, _, _ = force_scales(model, x, m)
    unit = np.where(S0 > 0.0, S0, 1.0)            # the equations' scales, fixed for the iteration
    v = model.velocity_at_atoms(x, m)
    r0 = speeds_of(v)
    history, balance = [float(r0.max())], [scaled_residual(r0, S0)]
    message = ""
    converged = False
    it = 0
    full = False                                   # the last step was a full Newton step
    while True:
        r = speeds_of(v)
        if it >= min_iter and np.all(balanced(r, force_scales(model, x, m)[0], tol, rtol)):
            quick = balance[-1] <= ROUND_OFF_BALANCE or (
                full and balance[-1] <= QUADRATIC_CONTRACTION * balance[-2])
            if quick:
                converged = True
                message = (f"balanced after {it} Newton steps: max |v| = {history[-1]:.3g}, max |v| / S = "
                           f"{balance[-1]:.3g}")
                break
        if not np.all(np.isfinite(v)):
            message = f"non-finite velocity after {it} Newton steps"
            break
        if it >= max_iter:
            message = (f"not balanced in {max_iter} Newton steps: max |v| = {history[-1]:.3g}, max |v| / S = "
                       f"{balance[-1]:.3g}" + (" (converging no faster than linearly: a singular Jacobian, "
                                               "a slow state rather than a balanced one)"
                                               if balance[-1] <= 1e-6 else ""))
            break
        parts = _parts(model, x, m)
        E = parts.E
        J = _reduced_from(model, parts) / np.repeat(unit, n)[:, None]
        res = (np.einsum("idn,id->in", E, v) / unit[:, None]).reshape(-1)
        R = neutral_directions(model, x, E)
        Q = scipy.linalg.null_space(R.T) if R.shape[1] else np.eye(k * n)
        if Q.shape[1] == 0:
            # every direction moves the state along its symmetry orbit (one atom without a perceptron): there
            # is nothing to solve for, and the balance decides
            step = np.zeros_like(x)
        else:
            y = scipy.linalg.lstsq(J @ Q, -res, cond=rcond, lapack_driver="gelsy")[0]
            step = np.einsum("idn,in->id", E, (Q @ y).reshape(k, n))
        longest = float(speeds_of(step).max())
        if not math.isfinite(longest):
            message = f"no Newton step (max |v| = {history[-1]:.3g}): a non-finite step"
            break
        if longest == 0.0:
            # the residual lies along directions the Jacobian does not see (or is zero): nothing moves
            it += 1
            full = False
            history.append(history[-1])
            balance.append(balance[-1])
            continue
        alpha = min(1.0, max_step / longest)
        norm0 = float(np.linalg.norm(v / unit[:, None]))
        accepted = False
        for _ in range(max_halvings + 1):
            xn = x + alpha * step
            xn /= np.linalg.norm(xn, axis=1, keepdims=True)
            vn = model.velocity_at_atoms(xn, m)
            if np.all(np.isfinite(vn)) and np.linalg.norm(vn / unit[:, None]) <= (1.0 - 1e-4 * alpha) * norm0:
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            if norm0 == 0.0 or balance[-1] <= ROUND_OFF_BALANCE:
                # at the round-off of the forces no step lowers the residual: the step itself is that noise
                it += 1
                full = False
                history.append(history[-1])
                balance.append(balance[-1])
                continue
            message = (f"line search failed after {it} Newton steps: no decrease of |v| along the Newton "
                       f"direction (max |v| = {history[-1]:.3g}); no stationary state near")
            break
        full = alpha == 1.0
        x, v = xn, vn
        it += 1
        rn = speeds_of(v)
        history.append(float(rn.max()))
        balance.append(scaled_residual(rn, S0))
        if max_displacement is not None:
            far = arc_lengths(x, x0) > max_displacement
            if np.any(far):
                message = (f"an atom moved beyond max_displacement after {it} Newton steps (max |v| = "
                           f"{history[-1]:.3g})")
                break
    disp = arc_lengths(x, x0)
    S, dead, underflow = force_scales(model, x, m)
    r = speeds_of(v)
    info = PolishInfo(converged=converged, iterations=it, max_speed=history[-1], initial_max_speed=history[0],
                      displacement=disp, message=message, speeds=history, residuals=r, scales=S,
                      initial_residuals=r0, initial_scales=S0, dead=dead, underflow=underflow, balance=balance)
    return x, info
