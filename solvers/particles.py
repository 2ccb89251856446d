"""Particle solver of the model (docs/model.md §1) on S^{d-1}, any d >= 2.

:func:`simulate_particles` runs it (:func:`prepare_particles` checks and places the particles first);
its options, integrators and stopping rules in use: docs/numerics.md, "The particle solver".

Notes
-----
N weighted particles x_i (w_i > 0, sum w_i = 1) move with the velocity of their empirical measure
mu_N = sum_j w_j delta_{x_j}:

    dx_i/dt = v[mu_N](x_i),   v = Model.velocity(G, Psi, drift)        (the PDE's definition)
    Psi(x)  = sum_j w_j exp(beta(<x, x_j> - 1)),   G(x) = sum_j w_j exp(beta(<x, x_j> - 1)) P_x x_j,

self-interaction included. With noise nu > 0: dX = v dt + sqrt(2 nu) dB on the sphere, stepped by Strang
splitting: half the noise, the drift step, half the noise (each half a geodesic Euler–Maruyama increment of
h/2), so that the invariant measure of the stepping is O(h^2) from the SDE's (a Lie splitting, drift then
the whole noise, is O(h) off). Time is the
model's time (layers); positions are unit vectors; the velocity is in radians per unit time.

Interaction sums come from :mod:`solvers.interaction` (direct for any d; Fourier series on S^1 and
harmonic series on S^2, through ducc0's NUFFTs). Integrators, all staying on the sphere:

- ``"euler"``: x <- (x + h v(x)) / |x + h v(x)| — the reference experiments' scheme (the main paper §4);
- ``"rk4"``: classical Runge–Kutta for the extension F(x) = v(x / |x|) of the field to R^d \\ {0}
  (its exact flow preserves |x|, so RK4 of F is 4th-order on the sphere), then normalisation;
- ``"adaptive"``: Dormand–Prince 5(4) of the same F, error control on max_i |err_i| <= atol + rtol
  (positions are unit vectors, so rtol is an angle), normalisation after each accepted step.

Noise (nu > 0) is added after the deterministic step by a geodesic Euler–Maruyama step
x <- exp_x(sqrt(2 nu h) P_x xi), xi ~ N(0, I_d) (Lie splitting, weak order 1; the exponential map
produces the Ito drift -nu (d-1) x dt of Brownian motion on the sphere). Not with "adaptive".

Snapshots record what :class:`ParticleResult` lists; :class:`StopRule` ends a run as the reference
experiments do, when the cluster count and the largest drift have settled.

A fixed step can be beyond the integrator's stability bound (a strong attention, gamma = e^beta, or a
perceptron of large weights): the particles then oscillate about their clusters, or settle where the
flow has no stationary point, and the run still ends at t_final or "converged". Each fixed step without
noise is therefore measured, from the velocities at its two ends (which the next step needs anyway):

    q = h ||v(x_{n+1}) - v(x_n)||_w / ||x_{n+1} - x_n||_w      (weighted RMS over the particles),

h |lambda| for a linear flow along its mode lambda (v = lambda x: Delta v = lambda Delta x). A step with
q above the stability bound of the method on the negative real axis (:data:`STABILITY_BOUND`: Euler 2,
RK4 2.785; the flow's contractions are real, gradient flows' Jacobians being symmetric) amplifies that
mode. Snapshots record the largest q since the previous one (``step_stiffness``); a run whose q went
over the bound says so in its message (``ParticleResult.beyond_stability``), with the first time. A
collapsing cluster under attention of strength gamma tends to q = h gamma (measured values:
docs/studies.md). Not measured with noise (its increment dominates the displacement) nor for "adaptive" (its error
control rejects such steps); above 2^16 particles q reads every k-th particle (a fixed stride).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from spectral import fourier, sphere
from . import validators as check
from ._memory import refuse_if_too_big
from .model import Model, VonMisesFisher, density_values
from .restart import ParticleState
from .empirical import measure_energy, measure_velocity
from .particle_result import ParticleResult, cluster_radius
from .particle_run import ParticleRun
from .particle_spec import (DEFAULT_DT, INITS, INTEGRATORS, STOP_REASONS, STOP_WINDOW_MIN, ParticleOptions,
                            ParticleSpec, StopRule)

__all__ = ["simulate_particles", "ParticleResult", "ParticleOptions", "ParticleSpec", "StopRule", "initial_particles",
           "cluster_radius", "measure_velocity", "measure_energy", "prepare_particles", "prepare_spec", "ParticleRun",
           "STOP_REASONS", "INTEGRATORS", "INITS", "DEFAULT_DT", "STOP_WINDOW_MIN"]

# ----------------------------------------------------------------------------------------------
# initial particles
# ----------------------------------------------------------------------------------------------


def _uniform_sphere(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    nrm = np.linalg.norm(x, axis=1)
    while np.any(nrm == 0):        # probability zero, but never divide by 0
        bad = nrm == 0
        x[bad] = rng.standard_normal((int(bad.sum()), d))
        nrm = np.linalg.norm(x, axis=1)
    return x / nrm[:, None]


#: rejection sampling refuses densities that would need more proposals than this (minutes of work)
_MAX_PROPOSALS = 1e9


def _rejection_sample(rng: np.random.Generator, n: int, d: int, density: Callable) -> tuple[np.ndarray, float]:
    """n i.i.d. samples of density * sigma by rejection against sigma, with a bound that is raised
    (and the sampling restarted) whenever a proposal exceeds it, so the samples are exact."""
    probe = density_values(density, _uniform_sphere(rng, 1 << 16, d))
    if probe.max() <= 0:
        raise ValueError("density vanishes on 65536 uniform probe points; cannot sample it")
    bound = 1.25 * probe.max()
    expected = n * bound / probe.mean()
    if expected > _MAX_PROPOSALS:
        raise ValueError(f"the density is too concentrated for rejection sampling: about {expected:.2g} proposals "
                         f"for n = {n} (its maximum is {probe.max() / probe.mean():.3g} times its mean); use "
                         "init='quadrature' (S^1, S^2) or a less concentrated density")
    while True:
        out, have = np.empty((n, d)), 0
        restart = False
        while have < n:
            # proposals in batches of at most 2^24 points (384 MiB at d = 3)
            m = min(max(1024, int(1.5 * (n - have) * bound / probe.mean())), 1 << 24)
            prop = _uniform_sphere(rng, m, d)
            vals = density_values(density, prop)
            if vals.max() > bound:
                bound, restart = 2.0 * vals.max(), True
                break
            acc = prop[rng.uniform(0.0, bound, m) < vals]
            take = min(len(acc), n - have)
            out[have:have + take] = acc[:take]
            have += take
        if not restart:
            return out, bound


def _circle_quadrature(n: int, density: Callable | None) -> tuple[np.ndarray, np.ndarray, str]:
    """Inverse-CDF image of the midpoint grid u_i = (i + 1/2) / n on S^1 (The model §3.6), equal weights.

    The CDF F(theta) = ∫_0^theta rho dtheta' / (2 pi) (rho normalised to mass 1) comes from the Fourier
    series of rho (sampled until its top half is below 1e-15), and F(theta_i) = u_i is solved by
    safeguarded Newton iterations to round-off.
    """
    if density is None:
        th = 2.0 * np.pi * (np.arange(n) + 0.5) / n
        return np.stack([np.cos(th), np.sin(th)], axis=1), np.full(n, 1.0 / n), "quadrature (uniform, midpoint)"
    M = 64
    while True:
        th = 2.0 * np.pi * np.arange(M) / M
        c = np.fft.rfft(density_values(density, np.stack([np.cos(th), np.sin(th)], axis=1))) / M
        if not c[0].real > 0:
            raise ValueError("density has zero mass")
        if np.max(np.abs(c[M // 4:])) <= 1e-15 * c[0].real:
            break
        if M >= 1 << 22:
            raise ValueError("quadrature init: the density is not resolved by 2^20 Fourier modes (is it smooth?); "
                             "use init='random'")
        M *= 2
    K = M // 4
    try:
        theta = fourier.inverse_cdf(c[:K], (np.arange(n) + 0.5) / n)
    except ValueError as e:
        raise ValueError(f"quadrature init: {e}") from None
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    return x, np.full(n, 1.0 / n), f"quadrature (inverse CDF of the midpoint grid, {K} Fourier modes of the density)"


def _sphere_quadrature(n: int, density: Callable | None) -> tuple[np.ndarray, np.ndarray, str]:
    """Gauss grid on S^2: nlat Gauss–Legendre nodes in cos(theta) x 2 nlat equispaced longitudes,
    weights proportional to density x quadrature weight."""
    nlat = int(round(math.sqrt(n / 2.0)))
    if nlat < 1 or 2 * nlat * nlat != n:
        near = sorted({2 * max(nlat - 1, 1) ** 2, 2 * max(nlat, 1) ** 2, 2 * (nlat + 1) ** 2})
        raise ValueError(f"init='quadrature' on S^2 uses a Gauss grid of nlat x 2 nlat nodes: n must be 2 nlat^2, "
                         f"got n = {n} (nearest: {near})")
    nphi = 2 * nlat
    x, q = sphere.gauss_nodes(nlat)                 # q: weights of the probability measure
    if density is None:
        return x, q / q.sum(), f"quadrature (Gauss grid {nlat} x {nphi}, uniform)"
    vals = density_values(density, x)
    if np.any(vals <= 0):
        raise ValueError("init='quadrature': the density must be > 0 at every Gauss-grid node (particle weights are "
                         "> 0)")
    w = vals * q
    return x, w / w.sum(), f"quadrature (Gauss grid {nlat} x {nphi}, weights density x Gauss weight)"


def initial_particles(d: int, n: int, init: str = "random", density: Callable | None = None,
                      seed: int | np.random.SeedSequence = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """Initial positions (n, d), weights (n,) (sum 1) and a description.

    Parameters
    ----------
    d : int
        Ambient dimension (>= 2).
    n : int
        Number of particles.
    init : {"random", "quasi-uniform", "quadrature"}
        "random": i.i.d. samples of density * sigma (uniform without a density; Wood's exact sampler for
        a :class:`~solvers.model.VonMisesFisher`; rejection sampling against sigma otherwise), equal
        weights. "quasi-uniform" (uniform only): equispaced on S^1,
        Fibonacci lattice on S^2, equal weights. "quadrature" (The model §3.6; d = 2, 3): on S^1 the
        inverse-CDF image of the midpoint grid, equal weights; on S^2 the Gauss grid (n = 2 nlat^2),
        weights proportional to density x Gauss weight.
    density : callable, optional
        Values of a density w.r.t. sigma at unit vectors (m, d) -> (m,), >= 0 (normalisation free).
    seed : int or SeedSequence
        For "random".
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    check.integer("n", n, ge=1)
    if density is not None and not callable(density):
        raise ValueError(f"density must be a callable on unit vectors (m, d) or None, got {type(density).__name__}")
    n = int(n)
    if init == "random":
        rng = np.random.default_rng(seed)
        if density is None:
            return _uniform_sphere(rng, n, d), np.full(n, 1.0 / n), "random (uniform, i.i.d.)"
        if isinstance(density, VonMisesFisher):
            if density.d != d:
                raise ValueError(f"the von Mises–Fisher density has d = {density.d} (mu), the particles d = {d}")
            return (density.sample(rng, n), np.full(n, 1.0 / n),
                    f"random (i.i.d. von Mises–Fisher samples, kappa {density.kappa:g}, by Wood's algorithm)")
        x, bound = _rejection_sample(rng, n, d, density)
        return x, np.full(n, 1.0 / n), f"random (i.i.d. samples of the density by rejection, bound {bound:.6g})"
    if init == "quasi-uniform":
        if density is not None:
            raise ValueError("init='quasi-uniform' places uniform particles only; a density needs "
                             "init='random' or init='quadrature'")
        if d == 2:
            th = 2.0 * np.pi * np.arange(n) / n
            return np.stack([np.cos(th), np.sin(th)], axis=1), np.full(n, 1.0 / n), "quasi-uniform (equispaced)"
        if d == 3:
            i = np.arange(n) + 0.5
            z = 1.0 - 2.0 * i / n
            phi = math.pi * (1.0 + math.sqrt(5.0)) * i      # golden-angle increments
            s = np.sqrt(1.0 - z * z)
            x = np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=1)
            return x, np.full(n, 1.0 / n), "quasi-uniform (Fibonacci lattice)"
        raise ValueError(f"init='quasi-uniform' exists on S^1 and S^2 (d = 2, 3), not d = {d}; use init='random'")
    if d == 2:
        return _circle_quadrature(n, density)
    if d == 3:
        return _sphere_quadrature(n, density)
    raise ValueError(f"init='quadrature' exists on S^1 and S^2 (d = 2, 3), not d = {d}; use init='random'")


# ----------------------------------------------------------------------------------------------
# result
# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# the solver
# ----------------------------------------------------------------------------------------------
#: arrays of N x d doubles a run holds at its peak besides its snapshots: the integrator's stages, the
#: velocity and the sums' per-point arrays: a bound of what the integrators hold on S^1 (on S^2 the sums hold
#: fewer per particle, besides fixed tables); the figures are in docs/performance.md
WORK_ARRAYS = 18.0


def _refuse_infeasible(d: int, n: int | None, t_final: float | None, integrator: str, dt: float | None,
                       save_every: float | None, opts: ParticleOptions, t0: float) -> None:
    """ValueError for a run that cannot finish: more fixed steps than max_steps, or its snapshots and working
    arrays beyond memory."""
    if n is None:
        return
    parts = {}
    # with a stopping rule and no t_final its length, hence its snapshots, are not known in advance
    if t_final is not None:
        left = t_final - t0
        if integrator != "adaptive":
            ratio = left / dt - 1e-9
            steps = math.ceil(ratio) if math.isfinite(ratio) else ratio
            if steps > opts.max_steps:
                raise ValueError(f"t_final / dt = {steps} steps of the fixed-step integrator {integrator!r} exceed "
                                 f"max_steps = {opts.max_steps}; raise max_steps or dt")
        ratio = left / save_every if save_every is not None else 0.0
        n_snap = 2 + (math.ceil(ratio) if math.isfinite(ratio) else ratio)
        # kept as rows, then stacked into the result (as the PDE's snapshots: 2.5 x)
        parts[f"{n_snap} snapshots of {n} particles kept and stacked"] = 2.5 * n_snap * n * d * 8.0
    parts["working arrays"] = WORK_ARRAYS * n * d * 8.0
    refuse_if_too_big(parts, "raise save_every or lower n" if t_final is not None else "lower n")


def simulate_particles(model: Model, n: int | None = None, x0: np.ndarray | None = None,
                       weights: np.ndarray | None = None, t_final: float | None = None, init: str = "random",
                       density: Callable | None = None, seed: int = 0, integrator: str = "rk4",
                       dt: float | None = None, save_every: float | None = None, stop=None, *,
                       progress: bool | Callable[[dict], None] = False,
                       callback: Callable[[dict], None] | None = None,
                       restart: dict | None = None, **options) -> ParticleResult:
    """Evolve N weighted particles under the velocity of their empirical measure.

    ``prepare_particles(...).run(progress=, callback=)``: see :func:`prepare_particles` for the
    arguments (the same) and ``progress`` / ``callback`` below.

    progress : bool or callable
        True: a tqdm bar; a callable receives a dict (t, dt, nsteps, ...) after every accepted step
        (at most every ``interval`` seconds if it has that attribute: :class:`solvers.stepping.Progress`).
    callback : callable, optional
        Receives every snapshot as a dict (t, x, energy, max_drift, dissipation, cluster_count, restart)
        as soon as it is taken.

    Returns
    -------
    ParticleResult
    """
    return prepare_particles(model, n, x0, weights, t_final, init, density, seed, integrator, dt, save_every, stop,
                             restart=restart, **options).run(progress=progress, callback=callback)


def _place_particles(d: int, n: int | None, x0, weights, init: str, density: Callable | None,
                     seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The initial positions (N, d), weights (N,) summing to 1 and their description, from ``x0`` or placed
    by ``init`` (arguments of :func:`prepare_particles`); ValueError for arguments that conflict."""
    if x0 is not None:
        if density is not None:
            raise ValueError("x0 and density conflict: give initial positions or a density to sample, not both")
        if init != "random":
            raise ValueError(f"x0 and init={init!r} conflict: init places particles only when x0 is not given")
        x = np.array(x0, dtype=float)
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"x0 must have shape (N, {d}) for d = {d}, got {x.shape}")
        if x.shape[0] < 1:
            raise ValueError("x0 must hold at least one particle")
        if n is not None and n != x.shape[0]:
            raise ValueError(f"n = {n!r} conflicts with x0, which holds {x.shape[0]} particles")
        if not np.all(np.isfinite(x)):
            raise ValueError("x0 must be finite")
        nrm = np.linalg.norm(x, axis=1)
        if np.any(nrm == 0):
            raise ValueError(f"x0 row {int(np.nonzero(nrm == 0)[0][0])} is zero; positions must be non-zero "
                             "(they are normalised onto the sphere)")
        x = x / nrm[:, None]
        w = None
        desc = "given positions x0"
    else:
        if n is None:
            raise ValueError("give the number of particles n, initial positions x0, or a restart state")
        if weights is not None and init == "quadrature":
            raise ValueError("weights conflict with init='quadrature', which sets the weights itself")
        init_seq = np.random.SeedSequence(seed).spawn(2)[0]
        x, w, desc = initial_particles(d, n, init, density, init_seq)
    if weights is not None:
        wv = np.array(weights, dtype=float).reshape(-1) if np.ndim(weights) else None
        if wv is None or wv.shape != (x.shape[0],):
            raise ValueError(f"weights must hold one value per particle ({x.shape[0]}), got shape {np.shape(weights)}")
        if not np.all(np.isfinite(wv)) or np.any(wv <= 0):
            raise ValueError("weights must be finite and > 0")
        w = wv
    if w is None:
        w = np.full(x.shape[0], 1.0 / x.shape[0])
    w = w / w.sum()
    return x, w, desc


def prepare_particles(model: Model, n: int | None = None, x0: np.ndarray | None = None,
                      weights: np.ndarray | None = None, t_final: float | None = None, init: str = "random",
                      density: Callable | None = None, seed: int = 0, integrator: str = "rk4",
                      dt: float | None = None, save_every: float | None = None, stop=None, *,
                      restart: dict | None = None, **options) -> "ParticleRun":
    """Check the arguments of :func:`simulate_particles` and place the initial particles, without a step.

    Everything the run would refuse is refused here (ValueError, TypeError), including runs that cannot
    finish: more snapshots than memory holds, more fixed steps than ``max_steps``, a stopping rule
    with noise and no t_final. The run layer prepares before it creates an archive.

    Parameters
    ----------
    model : Model
        Any d >= 2.
    n : int, optional
        Number of particles (required unless x0 or restart is given; must match x0).
    x0 : array (N, d), optional
        Initial positions (finite, non-zero rows; normalised). Excludes ``init``/``density``.
    weights : array (N,), optional
        Particle weights > 0 (normalised to sum 1); default equal. Not with init="quadrature" on S^2,
        whose weights come from the density.
    t_final : float, optional
        Final time; None runs until the stopping rule holds (``stop`` required) or ``max_steps``.
    init : {"random", "quasi-uniform", "quadrature"}
        Initial placement when x0 is not given (see :func:`initial_particles`).
    density : callable, optional
        Initial density w.r.t. sigma for "random" / "quadrature" (default uniform).
    seed : int
        Seeds the initial sampling and the noise (independent streams spawned from one SeedSequence).
        None draws one from the operating system's entropy, recorded as the result's ``seed`` (so the
        run can be repeated).
    integrator : {"euler", "rk4", "adaptive"}
    dt : float, optional
        Step of "euler" / "rk4" (default 0.1, the reference experiments'); first step of "adaptive". A step
        that would pass a snapshot time or t_final is shortened to land on it (so a dt above t_final makes
        one step of t_final).
    save_every : float, optional
        Snapshot interval in time units (steps are shortened to land on snapshot times). Default:
        10 dt with a stopping rule (one snapshot every 10 steps, as the reference; 1.0 for "adaptive"
        without dt), else only t = 0 and the final time.
    stop : None, True, dict or StopRule
        The stopping rule (True: window 5, drift_tol 5e-4, scale 0.5), checked at every snapshot.
    restart : dict, optional
        ``ParticleResult.restart`` (or a callback's) of an earlier run with the same model and settings:
        the run continues exactly as the uninterrupted run would have (positions, time, RNG state, step
        count, step-size controller, stopping-rule history).
    **options
        See :class:`ParticleOptions` (sum, sum_tol, rtol, atol, dt_max, max_steps, ...).

    Returns
    -------
    ParticleRun
        ``.run(progress=, callback=)`` integrates it (once).
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a solvers.Model, got {type(model).__name__}")
    opts = ParticleOptions.from_kwargs(options, check.named_parameters(simulate_particles))
    spec = ParticleSpec.resolve(model, n, t_final, init, density, seed, integrator, dt, save_every, stop, opts)
    if restart is not None and (x0 is not None or n is not None or density is not None or weights is not None):
        raise ValueError("restart carries the particles: do not pass n, x0, weights or density with it")
    return prepare_spec(spec, x0, weights, restart)


def prepare_spec(spec: ParticleSpec, x0: np.ndarray | None = None, weights: np.ndarray | None = None,
                 restart: dict | None = None) -> "ParticleRun":
    """:func:`prepare_particles` of a resolved spec: the initial particles placed (``spec.n`` of them by
    ``spec.init``, or ``x0`` with ``weights``), or those of the ``restart`` state, whose run it continues."""
    d = spec.model.d
    state = None if restart is None else ParticleState.from_dict(restart)
    n_total = (np.shape(state.x)[0] if state is not None else np.shape(x0)[0] if x0 is not None
               else spec.n if check.is_integer(spec.n) else None)
    _refuse_infeasible(d, n_total, spec.t_final, spec.integrator, spec.dt, spec.save_every, spec.options,
                       state.t if state is not None else 0.0)
    if state is not None:
        x, w = state.x, state.w
        if x.ndim != 2 or x.shape[1] != d or w.shape != (x.shape[0],):
            raise ValueError(f"restart state does not hold (N, {d}) positions and (N,) weights")
        desc = state.initial
    else:
        x, w, desc = _place_particles(d, spec.n, x0, weights, spec.init, spec.density, spec.seed)
    return ParticleRun(spec, x, w, desc, state)


