"""Pseudo-arclength continuation of one stationary-state problem in the noise (``solvers.stationary``, Notes):
the predictor–corrector in X = (x, nu / nu_ref), its step control (:class:`ContinuationOptions`), and the events
it locates on the way (folds, branch points, the crossing of the uniform state's free energy).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .stationary_problems import INDEX_TOL, _Eval, _Problem

from .branch_spec import ContinuationOptions

__all__ = ["ContinuationOptions"]


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
        out: dict[str, list] = {"folds": [], "bifurcations": [], "crossings": []}
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
