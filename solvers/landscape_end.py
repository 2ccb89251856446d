"""A flow's end beside the global extremum of the energy: how far its energy is from E*, and whether it is the
extremum within its error bars.

The energy gap. With E* the extremum's energy (:func:`solvers.landscape.extremum`, E* in [energy - gap,
energy] in descent, [energy, energy + gap] in ascent), the end's gap is E(end) - E* >= 0 in descent and
E* - E(end) >= 0 in ascent; ``energy_gap`` is it with E* = the extremum's energy, and ``energy_gap_bounds``
the proven interval [energy_gap, energy_gap + gap] (for the end's measure as given).

The end's error bars. An end given with position errors delta_i (radians) and mass errors Delta_i has an
energy known within ``energy_error``: moving the atoms along great circles by delta_i and their masses by
Delta_i (both measures probabilities, so sum of the true Delta_i is 0 and Phi may be shifted by any constant
c) changes E by at most

    sum_i w_i |grad Phi(x_i)| delta_i + (gamma (beta + 1) + C_V / 2) sum_i w_i delta_i^2
    + sum_i Delta_i |Phi(x_i) - c| + gamma (sum_i Delta_i)^2 + (3 gamma + M_V) delta_max sum_i Delta_i,

from |d^2/ds^2 g(<x_i(s), x_j(s)>)| <= (beta + 1)(delta_i + delta_j)^2 for atoms moving at speeds delta_i,
|g - g(1)| <= 2, C_V = max |V''| along great circles (``Perceptron.curvature_bounds``) and M_V a bound on
|grad V| (``Perceptron.magnitude``); c is the mass-weighted mean of Phi at the atoms.

"global". The end is the extremum within its error bars when both hold:

- its energy is: the lower end of ``energy_gap_bounds`` is at most ``energy_error`` + ``energy_tol``;
- its atoms are: as many atoms as the extremum, paired one to one (the assignment of least total distance),
  each pair within the end's position error + ``position_tol`` and mass error + ``mass_tol``.

In descent the first alone has a meaning of its own: (gamma / 2) ||mu - mu*||_g^2 <= E(mu) - E* for every mu
(the module docstring of :mod:`solvers.landscape`), so a small energy gap bounds the end's distance from the
minimiser in the kernel's norm; ``kernel_distance`` is ||end - extremum||_g. The second can fail where the
extremum's atoms stand for a measure with a continuous support (a ring of atoms), which no flow end of
finitely many atoms matches atom by atom.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from .atomic import arc_lengths
from .landscape import Extremum, extremum as compute_extremum
from .model import Model

__all__ = ["EndVsExtremum", "compare_end", "POSITION_TOL", "MASS_TOL", "ENERGY_TOL"]

#: the tolerances of "global" beyond the end's error bars (radians, mass, energy)
POSITION_TOL = 1e-6
MASS_TOL = 1e-6
ENERGY_TOL = 1e-12


@dataclass(frozen=True)
class EndVsExtremum:
    """A flow's end against the global extremum (module docstring).

    kind : "minimum" or "maximum" (the extremum's).
    energy_end, energy_error : E of the end (``Model.energy_direct``) and the bound on its change within the
        end's error bars (0 without them).
    energy_star, gap : the extremum's energy and certificate.
    energy_gap : E(end) - E* (descent) or E* - E(end) (ascent), E* = ``energy_star``.
    energy_gap_bounds : the proven interval of the end's energy gap, [energy_gap, energy_gap + gap].
    matched : the atoms pair one to one within the tolerances; ``pairs`` lists (end atom, extremum atom,
        distance in radians, mass difference end - extremum) for the best assignment (empty when the counts
        differ).
    kernel_distance : ||end - extremum||_g (the kernel's norm, 0 for equal measures).
    is_global : the end is the extremum within its error bars (module docstring).
    reason : one line saying why (not).
    """

    kind: str
    energy_end: float
    energy_error: float
    energy_star: float
    gap: float
    energy_gap: float
    energy_gap_bounds: tuple[float, float]
    matched: bool
    pairs: list
    kernel_distance: float
    is_global: bool
    reason: str

    def summary(self) -> str:
        lo, hi = self.energy_gap_bounds
        return (f"end vs global {self.kind}: energy gap {self.energy_gap:.6g} (proven in [{lo:.6g}, {hi:.6g}], "
                f"end's energy error {self.energy_error:.3g}); atoms {'matched' if self.matched else 'not matched'}; "
                f"kernel distance {self.kernel_distance:.3g}; {'GLOBAL' if self.is_global else 'not global'}: "
                f"{self.reason}")


def _array(v, shape, name: str) -> np.ndarray:
    out = np.zeros(shape) if v is None else np.asarray(v, dtype=float).reshape(shape)
    if not np.all(np.isfinite(out)) or np.any(out < 0):
        raise ValueError(f"compare_end: {name} must be finite and >= 0")
    return out


def end_energy_error(model: Model, x: np.ndarray, w: np.ndarray, dx: np.ndarray, dw: np.ndarray) -> float:
    """The bound of the module docstring on |E(end moved within its error bars) - E(end)|."""
    if not (np.any(dx) or np.any(dw)):
        return 0.0
    gamma = model.strength if model.attention != "none" else 0.0
    p = model.perceptron
    curv = max(abs(c) for c in p.curvature_bounds()) if p is not None else 0.0
    mag = p.magnitude() if p is not None else 0.0
    phi, grad = model.first_variation_direct(x, x, w)
    c = float(w @ phi)
    first = float(np.sum(w * np.linalg.norm(grad, axis=1) * dx))
    second = (gamma * (model.beta + 1.0) + 0.5 * curv) * float(np.sum(w * dx * dx))
    masses = float(np.sum(dw * np.abs(phi - c))) + gamma * float(np.sum(dw)) ** 2
    cross = (3.0 * gamma + mag) * float(np.max(dx)) * float(np.sum(dw))
    return first + second + masses + cross


def _same_model(a: Model, b: Model) -> bool:
    da, db = a.to_dict(), b.to_dict()
    pa, pb = da.pop("perceptron"), db.pop("perceptron")
    if da != db or (pa is None) != (pb is None):
        return False
    return pa is None or all(np.array_equal(np.asarray(pa[k]), np.asarray(pb.get(k))) for k in pa)


def _kernel_distance(model: Model, x1, w1, x2, w2) -> float:
    if model.attention == "none":
        return math.nan
    x = np.concatenate([x1, x2])
    w = np.concatenate([w1, -w2])
    q = float(w @ model.energy_kernel(x @ x.T, relative=True) @ w)
    return math.sqrt(max(q, 0.0))


def compare_end(model: Model, positions, masses, position_errors=None, mass_errors=None,
                extremum: Extremum | None = None, *, position_tol: float = POSITION_TOL,
                mass_tol: float = MASS_TOL, energy_tol: float = ENERGY_TOL) -> EndVsExtremum:
    """Compare a flow's atomic end with the global extremum of the energy (module docstring).

    Parameters
    ----------
    model : Model
        The flow's model (as :func:`solvers.landscape.extremum` takes it).
    positions, masses : arrays (k, d), (k,)
        The end's atoms; the masses must sum to 1 within the sum of their errors (or 1e-9).
    position_errors, mass_errors : arrays (k,), optional
        The end's error bars (radians, mass), e.g. ``TerminalState.position_errors`` and ``mass_errors``. A non-finite
        position error (NaN: an atom without a partner in the error-estimate rerun: its position is not known to
        any tolerance) counts as pi.
    extremum : Extremum, optional
        The model's extremum (computed when not given).
    """
    x = np.array(positions, dtype=float, ndmin=2)
    if x.ndim != 2 or x.shape[1] != model.d or not np.all(np.isfinite(x)) or len(x) == 0:
        raise ValueError(f"compare_end: positions must be finite with shape (k, {model.d}), k >= 1")
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    k = len(x)
    w = np.asarray(masses, dtype=float).reshape(-1)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"compare_end: masses must be {k} finite numbers >= 0")
    if position_errors is not None:
        position_errors = np.where(np.isfinite(np.asarray(position_errors, dtype=float)), position_errors, math.pi)
    dx = _array(position_errors, (k,), "position_errors")
    dw = _array(mass_errors, (k,), "mass_errors")
    if abs(w.sum() - 1.0) > max(1e-9, float(dw.sum())):
        raise ValueError(f"compare_end: the end's masses sum to {w.sum():.12g}, not 1 within their errors: a flow "
                         "end with a diffuse part is not an atomic measure to compare")
    w = w / w.sum()
    ext = compute_extremum(model) if extremum is None else extremum
    if not _same_model(ext.model, model):
        raise ValueError("compare_end: the extremum is of another model")
    e_end = model.energy_direct(x, w)
    err = end_energy_error(model, x, w, dx, dw)
    sign = 1.0 if ext.kind == "minimum" else -1.0
    egap = sign * (e_end - ext.energy)
    bounds = (egap, egap + ext.gap)
    pairs, matched = [], False
    if ext.continuous is None and len(ext.masses) == k:
        dist = arc_lengths(x[:, None, :], ext.positions[None, :, :])
        rows, cols = linear_sum_assignment(dist)
        pairs = [(int(i), int(j), float(dist[i, j]), float(w[i] - ext.masses[j])) for i, j in zip(rows, cols)]
        matched = all(dd <= dx[i] + position_tol and abs(dm) <= dw[i] + mass_tol for i, _, dd, dm in pairs)
    if ext.continuous is None:
        kd = _kernel_distance(model, x, w, ext.positions, ext.masses)
    else:
        kd = math.nan
    energy_ok = bounds[0] <= err + energy_tol
    is_global = bool(energy_ok and matched)
    if is_global:
        reason = "its energy and its atoms are the extremum's within the error bars"
    elif not energy_ok:
        reason = (f"its energy is {bounds[0]:.3g} {'above the minimum' if sign > 0 else 'below the maximum'}, "
                  f"beyond its error {err:.3g}")
    elif ext.continuous is not None or len(ext.masses) != k:
        reason = (f"its energy is within its error of E*, but it has {k} atom(s) and the extremum "
                  f"{len(ext.masses)}" + (" and a continuous part" if ext.continuous is not None else ""))
    else:
        reason = "its energy is within its error of E*, but some atoms differ beyond their error bars"
    return EndVsExtremum(kind=ext.kind, energy_end=e_end, energy_error=err, energy_star=ext.energy, gap=ext.gap,
                         energy_gap=egap, energy_gap_bounds=bounds, matched=matched, pairs=pairs,
                         kernel_distance=kd, is_global=is_global, reason=reason)
