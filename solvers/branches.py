"""Branches of stationary states in the noise: :func:`branch_from_uniform` (from a mode's threshold, with its kind,
folds, bifurcations and transition; :func:`prepare_branch` checks it first) and :func:`continue_branch` (through
any state, switching at the branch points it meets). The method: ``solvers.stationary``, Notes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import validators as check
from ._blas import blas_threads
from .model import Model
from .branch_spec import (BRANCH_DEGREE, BRANCH_MAX_DEGREE, BranchSpec, ContinuationOptions, _check_range,
                          branch_degrees)
from .branch_tracer import _Tracer
from .stationary import StationaryState, _state
from .stationary_problems import (DENSE_MAX, REPRESENTATIONS, _Dense, _newton, _one_blas_thread, _problem, _Problem)

__all__ = ["Branch", "BranchSetup", "ContinuationOptions", "branch_from_uniform", "branch_degrees", "refinement_lines",
           "BRANCH_DEGREE", "BRANCH_MAX_DEGREE", "prepare_branch", "prepare_spec", "continue_branch", "REPRESENTATIONS",
           "BranchSpec"]



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
    fit: dict[str, Any] = {f"a{j}": float(c) for j, c in zip(powers, coef)}
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
    located: dict[str, list] = {"folds": [], "bifurcations": [], "crossings": []}
    for found in found_by_side:
        for k in located:
            located[k] += found[k]
    for k in ("folds", "bifurcations", "crossings"):
        located[k] = _merge_mirrors(located[k])
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
        cands = [c["nu"] for c in located["crossings"] if c["stable"]]
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
                  folds=sorted(located["folds"], key=lambda q: q["nu"]),
                  bifurcations=sorted(located["bifurcations"], key=lambda q: q["nu"]), transition=transition,
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


@_one_blas_thread
def prepare_branch(model: Model, mode: int = 1, degree: int | None = None, noise_range=None, *,
                   representation: str = "auto", **options) -> BranchSetup:
    """Check the arguments of :func:`branch_from_uniform` and locate the threshold, without following the
    branch: every refusal of :func:`branch_from_uniform` is raised here (the run layer prepares before it
    creates an archive)."""
    return prepare_spec(BranchSpec.resolve(model, mode, degree, noise_range, representation=representation,
                                           **options))


@_one_blas_thread
def prepare_spec(spec: BranchSpec) -> BranchSetup:
    """:func:`prepare_branch` of a resolved spec: the problem set up and its threshold located."""
    model, mode, degree, representation, opts = spec.model, spec.mode, spec.degree, spec.representation, spec.options
    perceptron = model.perceptron is not None
    p = _problem(model, degree, representation)
    bare = _problem(model.replace(perceptron=None), degree, representation) if perceptron else p
    g_mode = float(model.energy_multipliers(mode)[mode])
    nu_c = _threshold(bare, mode, model.strength * g_mode)
    lo, hi = spec.noise_range if spec.noise_range is not None else (0.25 * nu_c, 1.5 * nu_c)
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
    done: dict = {}
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
