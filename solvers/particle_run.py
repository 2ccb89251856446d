"""The particle solver's loop: :class:`ParticleRun`, one prepared run (``particles.prepare_particles``) on the shared
loop of :class:`~solvers.stepping.Integration`: the steps, the noise, the snapshots, the stopping rule, the
measured stiffness of the fixed steps and the restart states (``particles`` module docstring)."""
from __future__ import annotations

import math
import time
from dataclasses import fields
from typing import Any, Callable

import numpy as np

from ._blas import blas_threads
from . import validators as check
from .atoms import clusters, spread_within
from .interaction import InteractionSums
from .interrupts import at_once, graceful_stop
from .restart import ParticleState
from .stepping import TABLEAUS, Integration, Progress, StepController
from .empirical import measure_velocity, measure_energy
from .particle_result import ParticleResult, cluster_radius
from .particle_spec import ParticleSpec

__all__ = ["ParticleRun", "STABILITY_BOUND"]

#: the stability bound of each fixed-step method on the negative real axis (|R(z)| <= 1 for z in
#: [-bound, 0]): Euler |1 + z| <= 1; RK4 R(z) = 1 + z + z^2/2 + z^3/6 + z^4/24 returns to +1 at z = -2.78529356...
#: (the real root of z^3 + 4 z^2 + 12 z + 24)
STABILITY_BOUND = {"euler": 2.0, "rk4": 2.785293563405282}
#: particles that the step-stiffness estimate reads: all up to this many, else every k-th (module docstring)
STIFFNESS_PROBES = 1 << 16
#: RMS displacement below which a step's stiffness is not estimated (round-off of unit vectors, or nothing moving)
STIFFNESS_FLOOR = 1e-12


class _StrangNoise:
    """A fixed-step stepper with noise: the leading half of the noise (``noise(x, h / 2)``), then the drift step
    from there (its first stage computed at that state); the run adds the closing half (ParticleRun.accept)."""

    def __init__(self, inner, noise) -> None:
        self.inner, self.noise = inner, noise

    def step(self, t: float, u: np.ndarray, h: float, f0: np.ndarray | None = None):
        with np.errstate(all="ignore"):
            half = self.noise(u, 0.5 * h)
        return self.inner.step(t, half, h, None)


class ParticleRun(Integration):
    """One prepared integration (:func:`prepare_particles`): state, stepping, snapshots, stopping rule, on
    the shared loop of :class:`~solvers.stepping.Integration`. :meth:`run` integrates it once."""

    stop_request: Any                 # the Ctrl-C request of solvers.interrupts while the loop runs

    def __init__(self, spec: ParticleSpec, x: np.ndarray, w: np.ndarray, desc: str,
                 state: ParticleState | None) -> None:
        self.spec = spec
        model, t_final, integrator, dt, save_every = spec.model, spec.t_final, spec.integrator, spec.dt, spec.save_every
        rule, seed, opts = spec.stop, spec.seed, spec.options
        tableau = {"euler": TABLEAUS["Euler"], "rk4": TABLEAUS["RK4"], "adaptive": TABLEAUS["DP54"]}[integrator]
        adaptive = integrator == "adaptive"
        super().__init__(t=0.0 if state is None else state.t, t_final=math.inf if t_final is None else t_final,
                         dt=dt if state is None else None if not math.isfinite(state.dt) else state.dt,
                         tableau=tableau, controller=StepController(tableau.error_order) if adaptive else None,
                         max_steps=opts.max_steps, nsteps=0 if state is None else state.nsteps,
                         nrejected=0 if state is None else state.nrejected,
                         steps={"t": [], "dt": [], "error": [], "accepted": []} if adaptive else None)
        self.model, self.w, self.initial = model, w, desc
        self.integrator, self.dt0, self.save_every, self.rule = integrator, dt, save_every, rule
        self.seed, self.opts = seed, opts
        self.progress: Any = None
        self.callback: Callable[[dict], None] | None = None
        self.last_restart: dict | None = None
        self._ran = False
        self.N = x.shape[0]
        self.sums = None
        if model.attention != "none":
            self.sums = InteractionSums(model.d, model.beta, opts.sum, tol=opts.sum_tol)
        self.sum_method = "none" if self.sums is None else self.sums.method_for(self.N)
        self.scale = rule.scale if rule is not None else 0.5
        self.cluster_rule = rule.rule if rule is not None else "linkage"
        self.spread_ok = True
        self.radius = cluster_radius(model.beta, model.d, self.scale)
        self.record_clusters = opts.record_clusters or rule is not None
        self.rows: list[dict] = []
        noise_seq = np.random.SeedSequence(seed).spawn(2)[1]
        self.rng = np.random.Generator(np.random.PCG64(noise_seq))
        # the fixed steps' stiffness q (module docstring): the step just accepted (x, v at its start, h) until
        # the velocity at its end is known; the largest q since the last snapshot, over the run, and the
        # time of the first step above the bound
        self.stability_bound = STABILITY_BOUND.get(integrator)
        self._measures = self.stability_bound is not None and model.noise == 0
        self._probe = slice(None, None, max(1, -(-self.N // STIFFNESS_PROBES)))
        self._step_from: tuple | None = None
        self.stiffness_since = self.stiffness_max = math.nan
        self.stiffness_over_t: float | None = None
        self.x = x
        self.save_index = 1 if state is None else state.save_index
        self.fresh = state is None
        if state is None:
            self.counts: list[int] = []
            self._last_snapshot_t = None
        else:
            # a state kept where an interruption stopped the run is after its last snapshot
            self._last_snapshot_t = state.last_snapshot_t
            self._check_settings(state.settings)
            self.counts = list(state.stop_counts)
            self.rng.bit_generator.state = state.rng_state
            if self.controller is not None and state.facold is not None:
                self.controller.facold = state.facold
            if state.stiffness is not None:          # (a restart state written before it was recorded: none)
                since, most, over = state.stiffness
                self.stiffness_since, self.stiffness_max = since, most
                self.stiffness_over_t = None if math.isnan(over) else over

    def _settings(self) -> dict:
        """What a restart must share with the run it continues (else it would not be that run)."""
        m = self.model
        return {"d": m.d, "beta": m.beta, "flow": m.flow, "attention": m.attention, "strength": m.strength,
                "noise": m.noise, "integrator": self.integrator, "dt": self.dt0, "save_every": self.save_every,
                "stop": None if self.rule is None else self.rule.settings()}

    def _check_settings(self, saved: dict | None) -> None:
        if saved is None:
            return
        now = self._settings()
        diff = [f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in now
                if (tuple(saved.get(k)) if isinstance(saved.get(k), list) else saved.get(k)) != now[k]]
        if diff:
            raise ValueError("restart state belongs to a run with other settings (" + "; ".join(diff)
                             + "); pass the same model, integrator, dt, save_every and stop")

    # --- the field ------------------------------------------------------------------------------
    def velocity(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """v at the unit vectors x (the particles themselves) and Psi there (None without attention)."""
        return measure_velocity(self.model, self.sums, x, self.w)

    def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        """F(u) = v(u / |u|): the field extended off the sphere (stage values of the Runge–Kutta methods)."""
        return self.velocity(u / np.linalg.norm(u, axis=1, keepdims=True))[0]

    # --- snapshots ------------------------------------------------------------------------------
    def _save_time(self, k: int) -> float:
        if self.save_every is None:
            return self.t_final
        return min(k * self.save_every, self.t_final)

    def _restart_state(self) -> dict:
        return ParticleState(
            t=self.t, last_snapshot_t=self._last_snapshot_t, x=self.x.copy(), w=self.w.copy(), nsteps=self.nsteps,
            nrejected=self.nrejected, save_index=self.save_index,
            dt=float(self.dt) if self.dt is not None else float("nan"), rng_state=self.rng.bit_generator.state,
            stop_counts=list(self.counts), stiffness=(self.stiffness_since, self.stiffness_max,
                                                      math.nan if self.stiffness_over_t is None else
                                                      self.stiffness_over_t),
            initial=self.initial, settings=self._settings(),
            facold=self.controller.facold if self.controller is not None else None).to_dict()

    def _snapshot(self) -> tuple[int, float]:
        """Record the current state; returns (cluster count, max drift)."""
        m = self.model
        v, psi = self.velocity(self.x)
        # the velocity at the state is the first stage of the next step (bitwise what a restart computes)
        self.f = v
        self._measure_step(v)
        energy = measure_energy(m, self.sums, self.x, self.w, psi)
        speed2 = np.einsum("nd,nd->n", v, v)
        max_drift = float(np.sqrt(speed2.max()))
        count = -1
        if self.record_clusters and np.all(np.isfinite(self.x)):
            _, masses, labels = clusters(self.x, self.w, self.radius, self.cluster_rule)
            count = len(masses)
            if self.rule is not None and self.rule.rule == "paper" and self.rule.spread_factor > 0:
                self.spread_ok = spread_within(self.x, labels, self.rule.spread_factor * self.radius)
        row = {"t": self.t, "x": self.x.copy(), "energy": energy, "max_drift": max_drift,
               "dissipation": float(m.sign * (self.w @ speed2)), "cluster_count": count,
               "step_stiffness": self.stiffness_since}
        self.stiffness_since = math.nan
        self.rows.append(row)
        self._last_snapshot_t = self.t
        self.last_restart = None
        return count, max_drift

    def _after_snapshot(self, count: int, max_drift: float, scheduled: bool) -> tuple[str, str] | None:
        """Stopping-rule bookkeeping, restart state and callback of the snapshot just taken."""
        verdict = None
        if not math.isfinite(max_drift):
            verdict = ("non-finite", "non-finite velocity at a snapshot")
        elif self.rule is not None and scheduled:
            self.counts.append(count)
            self.counts = self.counts[-self.rule.window:]
            if (len(self.counts) == self.rule.window and len(set(self.counts)) == 1
                    and max_drift <= self.rule.drift_tol and self.spread_ok):
                verdict = ("converged", f"{count} clusters ({self.rule.rule}) over {self.rule.window} snapshots "
                                        f"and max drift {max_drift:.3g} <= {self.rule.drift_tol:g}"
                                        + (f", no cluster wider than {self.rule.spread_factor:g} radii"
                                           if self.rule.rule == "paper" and self.rule.spread_factor > 0 else ""))
        self.last_restart = self._restart_state()
        if self.callback is not None:
            self.callback({**self.rows[-1], "restart": self.last_restart})
        return verdict

    # --- steps ----------------------------------------------------------------------------------
    def _measure_step(self, f_new: np.ndarray) -> None:
        """q = h ||Delta v||_w / ||Delta x||_w of the step just accepted, from ``f_new`` = v at its end (module
        docstring), into the largest since the last snapshot and over the run."""
        prev, self._step_from = self._step_from, None
        if prev is None:
            return
        x0, f0, h = prev           # the probed rows at the step's start
        p = self._probe
        w = self.w[p]
        dx = self.x[p] - x0
        dv = f_new[p] - f0
        moved = float(w @ np.einsum("nd,nd->n", dx, dx))
        if not moved > STIFFNESS_FLOOR ** 2 * float(w.sum()):
            return
        q = h * math.sqrt(float(w @ np.einsum("nd,nd->n", dv, dv)) / moved)
        if not math.isfinite(q):
            return
        self.stiffness_since = q if math.isnan(self.stiffness_since) else max(q, self.stiffness_since)
        self.stiffness_max = q if math.isnan(self.stiffness_max) else max(q, self.stiffness_max)
        if self.stiffness_over_t is None and q > self.stability_bound:
            self.stiffness_over_t = self.t

    def _stepper(self, lin, scaled):
        inner = super()._stepper(lin, scaled)
        return inner if self.model.noise == 0 else _StrangNoise(inner, self._noise)

    def _noise(self, x: np.ndarray, h: float) -> np.ndarray:
        """Geodesic Euler–Maruyama increment: exp_x(sqrt(2 nu h) P_x xi)."""
        xi = self.rng.standard_normal(x.shape)
        eta = math.sqrt(2.0 * self.model.noise * h) * (xi - np.einsum("nd,nd->n", x, xi)[:, None] * x)
        r = np.linalg.norm(eta, axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            sinc = np.where(r > 0, np.sin(r) / r, 1.0)
        y = np.cos(r) * x + sinc * eta
        return y / np.linalg.norm(y, axis=1, keepdims=True)

    def run(self, progress: bool | Callable[[dict], None] = False,
            callback: Callable[[dict], None] | None = None, checkpoint: Callable[[dict], None] | None = None,
            checkpoint_every: float | None = None) -> ParticleResult:
        """Integrate (see :func:`simulate_particles` for ``progress`` and ``callback``); once per prepared run.

        ``checkpoint``: called every ``checkpoint_every`` seconds of wall clock (after the step that ends
        them) with {"restart": the state of that step, which a restart continues from bit for bit}."""
        if self._ran:
            raise RuntimeError("this prepared particle run has already been run; prepare a new one")
        self._ran = True
        self.progress, self.callback = progress, callback
        if checkpoint is not None and checkpoint_every is not None:
            self.checkpoint_every = check.number("checkpoint_every", checkpoint_every, gt=0)
            self.checkpoint = lambda: checkpoint({"restart": self._restart_state()})
        with blas_threads(self.opts.blas_threads):
            return self._run()

    # --- the protocol of Integration --------------------------------------------------------------
    @property
    def state(self) -> np.ndarray:
        return self.x

    def rhs_at_state(self) -> np.ndarray | None:
        # with noise a step starts from the state after its leading half of the noise, and finds the velocity
        # there itself (_StrangNoise)
        return self.velocity(self.x)[0] if self.model.noise == 0 else None

    def error_norm(self, err: np.ndarray, u: np.ndarray, u_new: np.ndarray) -> float:
        return float(np.sqrt(np.einsum("nd,nd->n", err, err).max())) / (self.opts.atol + self.opts.rtol)

    def step_bound(self) -> float:
        return self.opts.dt_max or math.inf

    def save_time(self) -> float:
        return self._save_time(self.save_index)

    def accept(self, u_new: np.ndarray, f_new: np.ndarray | None, h: float, lands: bool) -> tuple[str, str] | None:
        """An accepted step: back onto the sphere, the noise increment, the snapshot (and stopping rule)."""
        with np.errstate(all="ignore"):
            x_new = u_new / np.linalg.norm(u_new, axis=1, keepdims=True)
        # a fixed step's stiffness is estimated once the velocity at its end is known: from its start state
        # and first stage, the velocity there
        # (the probed rows only: a copy for a strided probe, so a large run does not keep its old arrays)
        p = self._probe
        start = (np.ascontiguousarray(self.x[p]), np.ascontiguousarray(self.f[p]), h) if self._measures else None
        # F(u) = v(u/|u|): an FSAL method's last stage is the velocity at the new state
        self.f = f_new if self.controller is not None else None
        if self.model.noise > 0:
            with np.errstate(all="ignore"):
                x_new = self._noise(x_new, 0.5 * h)          # the closing half of the Strang step
            self.f = None
        if not np.all(np.isfinite(x_new)):
            return "non-finite", f"non-finite positions after the step to t = {self.t:.6g}"
        self.x = x_new
        self._step_from = start
        if lands:
            self.save_index += 1
            count, drift = self._snapshot()
            return self._after_snapshot(count, drift, scheduled=True)
        if start is not None and self.nsteps < self.max_steps:
            # the next step's first stage, evaluated now (the same call a restart makes, hence the same bits),
            # so that the step's stiffness is estimated with the state it belongs to (a checkpoint or an
            # interruption after it keeps its q); the last step of the budget is estimated at the run's closing
            # snapshot
            self.f = self.rhs_at_state()
            self._measure_step(self.f)
        return None

    def report(self, h: float) -> dict:
        return {"dt": h, "nsteps": self.nsteps}

    def _run(self) -> ParticleResult:
        wall0 = time.perf_counter()
        stop, message = None, ""
        progress = Progress(self.progress, self.t_final, self.t, self.opts.max_steps)
        try:
            if self.fresh:
                count, drift = self._snapshot()
                verdict = self._after_snapshot(count, drift, scheduled=False)
                if verdict:
                    stop, message = verdict
            if self.f is None:
                self.f = self.rhs_at_state()
            if self.integrator == "adaptive" and (self.dt is None or not math.isfinite(self.dt)):
                vmax = float(np.sqrt(np.einsum("nd,nd->n", self.f, self.f).max()))
                self.dt = self.dt0 or (0.01 / vmax if vmax > 0 else self._save_time(self.save_index) - self.t)
            if stop is None:
                # the first Ctrl-C stops the loop after its current step (solvers.interrupts), a second at once
                with graceful_stop() as self.stop_request:
                    stop, message = self.integrate(progress)
            if stop in ("t_final", "max_steps") and (not self.rows or self.rows[-1]["t"] != self.t):
                count, drift = self._snapshot()
                self._after_snapshot(count, drift, scheduled=False)
            if stop == "interrupted":
                # stopped after an accepted step: the state there is kept, and a resume continues from it
                self.last_restart = self._restart_state()
                message += f" after the step to t = {self.t:.6g}: its state is kept, and a resume continues from it"
        except KeyboardInterrupt:
            stop, message = "interrupted", at_once(self.stop_request)
        finally:
            progress.close()
        if self.stiffness_over_t is not None:
            message += (f"; the fixed step went beyond the stability bound of {self.integrator!r} (h |dv|/|dx| "
                        f"up to {self.stiffness_max:.3g} > {self.stability_bound:.4g}, first at t = "
                        f"{self.stiffness_over_t:.6g}): the positions may be artefacts of the step; lower dt or "
                        "use integrator='adaptive'")
        return self._result(stop, message, time.perf_counter() - wall0)

    def _result(self, stop: str, message: str, wall: float) -> ParticleResult:
        rows = self.rows
        d = self.model.d

        def col(key, dtype=float):
            return np.array([r[key] for r in rows], dtype=dtype)

        steps = None
        if self.steps is not None:
            steps = {"t": np.array(self.steps["t"]), "dt": np.array(self.steps["dt"]),
                     "error": np.array(self.steps["error"]), "accepted": np.array(self.steps["accepted"], dtype=bool)}
        return ParticleResult(
            model=self.model, t=col("t"),
            x=np.array([r["x"] for r in rows]) if rows else np.zeros((0, self.N, d)),
            w=self.w, energy=col("energy"), max_drift=col("max_drift"), dissipation=col("dissipation"),
            cluster_count=col("cluster_count", int), stop_reason=stop, message=message, t_stop=self.t,
            nsteps=self.nsteps, nrejected=self.nrejected, integrator=self.integrator, dt=self.dt0, seed=self.seed,
            stop=None if self.rule is None else {f.name: getattr(self.rule, f.name) for f in fields(self.rule)},
            options=self.opts.to_dict(), sum_method=self.sum_method, initial=self.initial, wall_time=wall,
            steps=steps, restart=self.last_restart, step_stiffness=col("step_stiffness"),
            stability_bound=self.stability_bound, beyond_stability=self.stiffness_over_t)
