"""The result of a particle run (:class:`ParticleResult`) and the cluster radius its summary counts at."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import validators as check
from .atoms import clusters
from .model import Model

__all__ = ["ParticleResult", "cluster_radius"]


def cluster_radius(beta: float, d: int, scale: float = 0.5) -> float:
    """Geodesic linkage radius min(scale / sqrt(beta), pi / (2 d)) of The model §5 (pi / (2 d) at beta = 0)."""
    cap = math.pi / (2.0 * d)
    return cap if beta == 0 else min(scale / math.sqrt(beta), cap)


@dataclass
class ParticleResult:
    """A run of :func:`simulate_particles`.

    Attributes
    ----------
    model : Model
    t : (T,) snapshot times
    x : (T, N, d) positions (unit vectors) at the snapshots
    w : (N,) weights (> 0, sum 1)
    energy : (T,) E of the empirical measure (``Model.energy``; a general-form perceptron contributes 0,
        as in the PDE solver)
    max_drift : (T,) max_i |v(x_i)| (radians per unit time; deterministic velocity, noise excluded)
    dissipation : (T,) s sum_i w_i |v_i|^2 (= dE/dt for noiseless USA, gradient perceptron)
    cluster_count : (T,) clusters at radius ``cluster_radius(beta, d, scale)`` (scale of the stopping rule,
        0.5 without one); -1 where not recorded
    stop_reason : one of STOP_REASONS; message : detail; t_stop : time reached
    nsteps, nrejected : accepted / rejected steps
    integrator, dt : the integrator and its (initial) step
    seed : the seed of the initial sampling and of the noise
    stop : the stopping rule as a dict, or None
    options : :class:`ParticleOptions` as a dict; sum_method : the interaction sums used
    initial : description of the initial particles
    steps : "adaptive" only: dict of arrays "t", "dt", "error", "accepted" of every attempted step
    step_stiffness : (T,) the largest q = h ||Delta v||_w / ||Delta x||_w of the fixed steps since the
        previous snapshot (module docstring); NaN where no step was measured (the first snapshot, noise,
        "adaptive", nothing moving), or None (an archive written before it was recorded)
    stability_bound : the fixed-step method's bound for q (Euler 2, RK4 2.785), None for "adaptive"
    beyond_stability : the time of the first step whose q went above ``stability_bound`` (also before a
        restart this run continues), or None
    restart : restart state of the last snapshot, or of the step where an interruption (Ctrl-C) stopped the run
        (resume exactly with ``simulate_particles(restart=...)``):
        a dict of plain values and arrays — "t", "x" (N, d), "w" (N,), "nsteps", "nrejected",
        "save_index" (next snapshot k, at k * save_every), "dt" (current step of "adaptive"), "facold"
        (step-size controller, "adaptive"), "rng_state" (the noise generator's PCG64 state dict),
        "stop_counts" (cluster counts of the stopping-rule window), "initial", and "settings" (model
        parameters, integrator, dt, save_every, stop rule — checked on resume).
    """

    model: Model
    t: np.ndarray
    x: np.ndarray
    w: np.ndarray
    energy: np.ndarray
    max_drift: np.ndarray
    dissipation: np.ndarray
    cluster_count: np.ndarray
    stop_reason: str
    message: str
    t_stop: float
    nsteps: int
    nrejected: int
    integrator: str
    dt: float | None
    seed: Any
    stop: dict | None
    options: dict
    sum_method: str
    initial: str
    wall_time: float
    steps: dict | None = None
    restart: dict | None = None
    step_stiffness: np.ndarray | None = None
    stability_bound: float | None = None
    beyond_stability: float | None = None

    def stiffness_line(self) -> str | None:
        """The fixed steps' stiffness in one line (``summary`` and ``attnpde info``): the largest q over the
        snapshots, the method's bound, and from when the steps went beyond it; None when nothing was
        measured (or recorded: an older archive)."""
        q, over = self.step_stiffness, self.beyond_stability
        if q is None:
            return None
        measured = bool(np.any(np.isfinite(q)))
        if not measured and over is None:
            return None
        most = f" up to {np.nanmax(q):.3g}," if measured else ""
        return (f"fixed steps: h |dv|/|dx|{most} stability bound of {self.integrator!r} {self.stability_bound:.4g}"
                + (f": BEYOND it from the step to t = {over:.6g} on (the positions may be artefacts of the step; "
                   "lower dt)" if over is not None else ""))

    def _index(self, i: int) -> int:
        T = len(self.t)
        if not -T <= i < T:
            raise IndexError(f"snapshot index {i} out of range for {T} snapshots")
        return i % T

    def clusters(self, i: int = -1, scale: float = 0.5, rule: str = "linkage") -> tuple[np.ndarray, np.ndarray]:
        """Centres (k, d) (normalised weighted means) and masses (k,), heaviest first, of the clusters
        at snapshot i at geodesic radius min(scale / sqrt(beta), pi / (2 d)), by ``rule``: "linkage"
        (single linkage) or "paper" (the released code's rule: greedy arcs on S^1, components on S^2;
        :mod:`solvers.atoms`)."""
        i = self._index(i)
        check.number("scale", scale, gt=0)
        centres, masses, _ = clusters(self.x[i], self.w, cluster_radius(self.model.beta, self.model.d, scale), rule)
        return centres, masses

    @property
    def cluster_rule(self) -> tuple[float, str]:
        """(scale, rule) of the run's stopping rule; (0.5, "linkage") without one."""
        return (float(self.stop["scale"]), str(self.stop.get("rule", "linkage"))) if self.stop else (0.5, "linkage")

    def summary(self) -> str:
        m = self.model
        N = self.w.size
        lines = [
            f"particles on S^{m.d - 1}: N={N} beta={m.beta:g} flow={m.flow} attention={m.attention} "
            f"strength={m.strength:g} noise={m.noise:g} perceptron={m.perceptron!r}",
            f"  init: {self.initial}; integrator {self.integrator}"
            + (f" dt={self.dt:g}" if self.dt is not None else "") + f"; sums {self.sum_method}; seed {self.seed}",
            f"  stop: {self.stop_reason} at t={self.t_stop:.6g} ({self.message})",
            f"  {self.nsteps} steps" + (f" ({self.nrejected} rejected)" if self.nrejected else "")
            + f", {len(self.t)} snapshots, wall {self.wall_time:.2f} s",
        ]
        stiffness = self.stiffness_line()
        if stiffness is not None:
            lines.append("  " + stiffness)
        if len(self.t):
            lines.append(f"  energy {self.energy[0]:.10g} -> {self.energy[-1]:.10g}; max drift "
                         f"{self.max_drift[0]:.3g} -> {self.max_drift[-1]:.3g}")
            scale, rule = self.cluster_rule
            _, masses = self.clusters(-1, scale, rule)
            lines.append(f"  clusters ({rule}, scale {scale:g}, radius {cluster_radius(m.beta, m.d, scale):.4g}): "
                         f"{len(masses)}, masses " + ", ".join(f"{v:.4f}" for v in masses[:12])
                         + (" ..." if len(masses) > 12 else ""))
        return "\n".join(lines)
