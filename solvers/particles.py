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
import time
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

from spectral import fourier, sphere
from ._blas import blas_threads
from ._chunks import map_chunks
from . import validators as check
from ._memory import refuse_if_too_big
from .atoms import CLUSTER_RULES, clusters, spread_within
from .interaction import DEFAULT_BLOCK_BYTES, DEFAULT_TOL, SUM_METHODS, InteractionSums
from .interrupts import at_once, graceful_stop
from .model import Model, VonMisesFisher, density_values
from .restart import ParticleState
from .stepping import TABLEAUS, Integration, Progress, StepController

__all__ = ["simulate_particles", "ParticleResult", "ParticleOptions", "StopRule", "initial_particles",
           "cluster_radius", "measure_velocity", "measure_energy", "prepare_particles", "ParticleRun",
           "STOP_REASONS", "INTEGRATORS", "INITS"]

STOP_REASONS = ("t_final", "converged", "non-finite", "max_steps", "interrupted")
INTEGRATORS = ("euler", "rk4", "adaptive")
INITS = ("random", "quasi-uniform", "quadrature")

#: step of the fixed-step integrators when none is given: the reference experiments' dt
DEFAULT_DT = 0.1

#: the stability bound of each fixed-step method on the negative real axis (|R(z)| <= 1 for z in
#: [-bound, 0]): Euler |1 + z| <= 1; RK4 R(z) = 1 + z + z^2/2 + z^3/6 + z^4/24 returns to +1 at z = -2.78529356...
#: (the real root of z^3 + 4 z^2 + 12 z + 24)
STABILITY_BOUND = {"euler": 2.0, "rk4": 2.785293563405282}
#: particles that the step-stiffness estimate reads: all up to this many, else every k-th (module docstring)
STIFFNESS_PROBES = 1 << 16
#: RMS displacement below which a step is not measured (round-off of unit vectors, or nothing moving)
STIFFNESS_FLOOR = 1e-12


#: points per chunk of the pointwise part of a velocity evaluation (:func:`measure_velocity`). A chunk is
#: about 15 numpy calls, and two threads contend for the GIL around each: 2^15 makes half as many calls
#: as 2^14, and its temporaries (up to 0.5 MiB each) still stay in the last-level cache. The velocities do
#: not depend on the chunk size
POINTWISE_CHUNK = 2 ** 15


def measure_velocity(model: Model, sums: InteractionSums | None, x: np.ndarray, w: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """v[mu](x) at the points of mu = sum_j w_j delta_{x_j} themselves (self-interaction included), and Psi
    there (None without attention): ``Model.velocity`` of the kernel sums and the perceptron drift. The
    particle solver and the PDE's Lagrangian continuation both move their points with it."""
    if sums is None:
        return model.velocity(np.zeros_like(x), None, model.drift(x)), None
    psi, G = sums.fields(x, w)

    # the pointwise part (the drift, then v = s (G + drift) in place of G) chunk by chunk on the sums'
    # threads: its temporaries stay in cache (faster than at once even on one thread) and fresh arrays of
    # N points are not paged in
    def pointwise(j: int, c: slice) -> None:
        model.velocity(G[c], psi[c, None], model.drift(x[c]), out=G[c])
    if x.shape[0] <= POINTWISE_CHUNK:
        pointwise(0, slice(None))
    else:
        map_chunks(pointwise, x.shape[0], POINTWISE_CHUNK, sums.nufft_threads, "attnpde-pointwise")
    return G, psi


def measure_energy(model: Model, sums: InteractionSums | None, x: np.ndarray, w: np.ndarray,
                   psi: np.ndarray | None) -> float:
    """E of mu = sum_j w_j delta_{x_j} (``Model.energy``; the pair term from Psi at the points)."""
    pair = sums.pair(x, w, psi) if sums is not None else 0.0
    pot = float(w @ model.potential(x)) if model.perceptron is not None and model.perceptron.is_gradient else 0.0
    return model.energy(pair, pot)


def cluster_radius(beta: float, d: int, scale: float = 0.5) -> float:
    """Geodesic linkage radius min(scale / sqrt(beta), pi / (2 d)) of The model §5 (pi / (2 d) at beta = 0)."""
    cap = math.pi / (2.0 * d)
    return cap if beta == 0 else min(scale / math.sqrt(beta), cap)


# ----------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------
#: the stopping rule looks at this many snapshots at least (one snapshot is trivially "unchanged")
STOP_WINDOW_MIN = 2


@dataclass
class StopRule:
    """The stopping rule of the main paper's experiments (its §4; The model §5), with this package's defaults.

    A run stops when the cluster count at radius r = min(scale / sqrt(beta), pi / (2 d)) is unchanged over
    ``window`` snapshots and the largest drift is at most ``drift_tol``. The released code also asks that no
    cluster be wider than r, uses greedy arcs on S^1 and drift_tol 1e-4: ``StopRule(rule="paper",
    drift_tol=1e-4)`` is that rule. The defaults differ on all three: single linkage on every sphere, no
    spread condition, drift_tol 5e-4. So a set that has not concentrated but moves slower than drift_tol
    (in descent with ReLU, the mass where every unit is inactive, which gathers into atoms only over
    thousands of time units) stops a default run; its "clusters" are then chains of particles within r
    of one another, not atoms.

    Attributes
    ----------
    window : int
        Number of consecutive snapshots (after t = 0) with the same cluster count.
    drift_tol : float
        Largest drift max_i |v(x_i)| allowed at the last of them (radians per unit time).
    scale : float
        Cluster radius min(scale / sqrt(beta), pi / (2 d)).
    rule : {"linkage", "paper"}
        How clusters are counted (:func:`solvers.atoms.clusters`): single linkage, or the released code's
        rule (greedy arcs on S^1, components on S^2).
    spread_factor : float
        With ``rule="paper"`` only, the released code's third condition: every cluster's diameter
        (:func:`solvers.atoms.cluster_spread`) is <= spread_factor x the radius at the last snapshot
        (0 drops it; its default 1).
    """

    window: int = 5
    drift_tol: float = 5e-4
    scale: float = 0.5
    rule: str = "linkage"
    spread_factor: float = 1.0

    def __post_init__(self) -> None:
        check.integer("stop: window", self.window, ge=STOP_WINDOW_MIN)
        check.number("stop: drift_tol", self.drift_tol, gt=0)
        check.number("stop: scale", self.scale, gt=0)
        if self.rule not in CLUSTER_RULES:
            raise ValueError(f"stop: rule must be one of {CLUSTER_RULES}, got {self.rule!r}")
        check.number("stop: spread_factor", self.spread_factor, ge=0)

    def settings(self) -> tuple:
        """What a restart must share (the linkage rule's triple as before the paper rule existed)."""
        base = (self.window, self.drift_tol, self.scale)
        return base if self.rule == "linkage" else base + (self.rule, self.spread_factor)

    @classmethod
    def from_arg(cls, stop) -> "StopRule | None":
        """None/False: no rule; True: the default rule (see the class); a dict of fields; or a StopRule."""
        if stop is None or stop is False:
            return None
        if stop is True:
            return cls()
        if isinstance(stop, cls):
            return stop
        if isinstance(stop, dict):
            unknown = sorted(set(stop) - {f.name for f in fields(cls)})
            if unknown:
                raise ValueError(f"stop: unknown field(s) {unknown}; allowed: window, drift_tol, scale, rule, "
                                 "spread_factor")
            return cls(**stop)
        raise ValueError("stop must be None, True, a dict (window, drift_tol, scale, rule, spread_factor) or a "
                         f"StopRule, got {stop!r}")


@dataclass
class ParticleOptions:
    """Numerical options of :func:`simulate_particles` (recorded with the run).

    Attributes
    ----------
    sum : {"auto", "direct", "fast", "nufft"}
        Interaction sums (:class:`solvers.interaction.InteractionSums`; "fast" and "nufft": S^1 and S^2).
    sum_tol : float
        Truncation of the series relative to lambda_0 (and the NUFFT precision, at least 3e-13).
    block_bytes : int
        Memory bound of a block of the numpy direct sums (bytes). The runs' sums are compiled and hold no
        blocks: it has no effect, and is kept so that the options of earlier runs read back.
    rtol, atol : float
        "adaptive" only: accepted when max_i |err_i| <= atol + rtol (radians).
    dt_max : float or None
        "adaptive" only: largest step.
    max_steps : int
        Stop with "max_steps" after this many accepted steps.
    record_clusters : bool
        Count clusters at every snapshot (always on when a stopping rule is given).
    blas_threads : int or None
        OpenBLAS threads during the run (default 1, see ``solvers._blas``; None: leave alone).
    """

    sum: str = "auto"
    sum_tol: float = DEFAULT_TOL
    block_bytes: int = DEFAULT_BLOCK_BYTES
    rtol: float = 1e-8
    atol: float = 1e-10
    dt_max: float | None = None
    max_steps: int = 1_000_000
    record_clusters: bool = True
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        check.choice("option sum", self.sum, SUM_METHODS)
        for name in ("sum_tol", "rtol", "atol"):
            check.number(f"option {name}", getattr(self, name), gt=0)
        check.number("option dt_max", self.dt_max, gt=0, allow_none=True)
        for name in ("block_bytes", "max_steps"):
            check.integer(f"option {name}", getattr(self, name), ge=1)
        check.integer("option blas_threads", self.blas_threads, ge=1, allow_none=True)
        check.flag("option record_clusters", self.record_clusters)

    @classmethod
    def from_kwargs(cls, options: dict, arguments: tuple = ()) -> "ParticleOptions":
        """The options ``options``; TypeError for an unknown one (``arguments``: the named parameters of
        simulate_particles, listed in the message)."""
        check.known_options("simulate_particles", options, [f.name for f in fields(cls)], arguments)
        return cls(**options)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


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


def _check_time(name: str, v, allow_none: bool = True) -> float | None:
    return check.number(name, v, gt=0, allow_none=allow_none)


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
    if integrator not in INTEGRATORS:
        raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    t_final = _check_time("t_final", t_final)
    dt = _check_time("dt", dt)
    save_every = _check_time("save_every", save_every)
    if seed is None:
        # every random choice has a seed on record: an unseeded run gets one, kept in its result
        seed = int(np.random.SeedSequence().entropy)
    elif not check.is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
    rule = StopRule.from_arg(stop)
    if t_final is None and rule is None:
        raise ValueError("give t_final, or a stopping rule (stop=True) to run until convergence")
    if model.noise > 0 and integrator == "adaptive":
        raise ValueError("integrator 'adaptive' controls the error of a deterministic step, which an O(sqrt(dt)) "
                         "noise increment swamps; with noise > 0 use 'euler' or 'rk4' with a fixed dt")
    if integrator != "adaptive" and dt is None:
        dt = DEFAULT_DT
    if save_every is None and rule is not None:
        save_every = 10.0 * (dt if dt is not None else DEFAULT_DT)
    d = model.d
    if model.noise > 0 and rule is not None and t_final is None:
        raise ValueError("a stopping rule with noise > 0 needs t_final: the deterministic drift of a noisy cloud "
                         "does not fall to drift_tol, so the rule alone would run to max_steps")
    state = None
    if restart is not None:
        if x0 is not None or n is not None or density is not None or weights is not None:
            raise ValueError("restart carries the particles: do not pass n, x0, weights or density with it")
        state = ParticleState.from_dict(restart)
    n_total = (np.shape(state.x)[0] if state is not None else np.shape(x0)[0] if x0 is not None
               else n if check.is_integer(n) else None)
    _refuse_infeasible(d, n_total, t_final, integrator, dt, save_every, opts, state.t if state is not None else 0.0)

    if state is not None:
        x, w = state.x, state.w
        if x.ndim != 2 or x.shape[1] != d or w.shape != (x.shape[0],):
            raise ValueError(f"restart state does not hold (N, {d}) positions and (N,) weights")
        desc = state.initial
    else:
        x, w, desc = _place_particles(d, n, x0, weights, init, density, seed)
    return ParticleRun(model, x, w, desc, t_final, integrator, dt, save_every, rule, seed, opts, state)


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

    def __init__(self, model, x, w, desc, t_final, integrator, dt, save_every, rule, seed, opts,
                 state: ParticleState | None) -> None:
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
        self.progress = self.callback = None
        self.last_restart = None
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
        self._step_from = None
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
        # a fixed step is measured (its stiffness) once the velocity at its end is known: from its start
        # state and first stage, the velocity there
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
            # so that the step is measured with the state it belongs to (a checkpoint or an interruption
            # after it keeps its q); the last step of the budget is measured by the run's closing snapshot
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
