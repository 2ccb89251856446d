"""``attnpde validate``: convergence of the particle system to the PDE as N grows.

The PDE of a configuration is solved once (into the archive's /pde, exactly as ``attnpde run`` does);
then for every N in the list and every seed s = particles.seed, ..., particles.seed + seeds - 1 the
particles of the configuration are run with that N and seed, and :func:`solvers.compare` measures
their distance to the PDE at the common snapshot times. The particle trajectories are not kept (they
would dominate the archive); the distances are, in ``/validation``::

    /validation   n (nN), seed (nS), t (T) [scale],
                  w1 (S^1 only), mmd, moment_gap, energy_gap: (nN, nS, T),
                  wall (nN, nS), stop_reason (nN, nS);
                  attrs: at (the time of the fit), slopes (JSON: metric -> fitted slope of
                  log mean distance against log N), config of the comparison, table (text)

The particle runs are independent tasks on a :class:`~solvers.app.executor.TaskPool` (``workers`` local
processes, or the workers of a Dask cluster with ``scheduler``); each is seeded, so the distances do not
depend on where it ran. The archive is written as ``OUT.part`` and renamed to ``OUT`` once finished, so an
archive under the final name is always complete.

For i.i.d. initial particles the distances at a fixed time should decrease like N^{-1/2} (slope -1/2)
while the PDE is resolved; quadrature particles (init = "quadrature") are not random and converge
at the rate of the quadrature instead.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..comparison import METRICS, ValidationResult
from .config import RunConfig

__all__ = ["validate", "ValidationResult", "fit_slope", "METRICS", "check_fit_time", "check_particle_counts"]

def fit_slope(n: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of log(values) against log(n) (NaN if fewer than two positive values)."""
    n, values = np.asarray(n, dtype=float), np.asarray(values, dtype=float)
    ok = np.isfinite(values) & (values > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(n[ok]), np.log(values[ok]), 1)[0])


def _job(pde, spec, n: int, seed: int, compare_opts: dict) -> dict:
    """One particle run of the study: the configuration's ``ParticleSpec`` with ``n`` and ``seed`` replaced,
    compared with the PDE."""
    from ..comparison import compare
    from ..particles import prepare_spec

    t0 = time.perf_counter()
    r = prepare_spec(dataclasses.replace(spec, n=n, seed=seed)).run()
    if r.stop_reason == "interrupted":
        raise KeyboardInterrupt          # a cut run is not a sample of the study: the study stops
    cmp = compare(pde, r, **compare_opts)
    out = {"n": n, "seed": seed, "t": cmp.t, "stop_reason": r.stop_reason, "wall": time.perf_counter() - t0}
    for k in METRICS:
        v = getattr(cmp, k)
        out[k] = None if v is None else np.asarray(v)
    return out


def _compare_opts(config: RunConfig) -> dict:
    o = dict(config.compare or {})
    return {k: o[k] for k in ("moments", "mmd_beta", "atom_threshold", "atom_radius", "smoothing", "min_mass",
                              "cluster_scale") if k in o}


def validate(config: RunConfig, ns: list[int], seeds: int, out: str | Path, *, workers: int = 2,
             force: bool = False, at: float | None = None, command: str = "",
             log: Callable[[str], None] | None = None, scheduler: str | None = None) -> ValidationResult:
    """Run the convergence study of the module docstring; returns its result (also in the archive).

    The particle runs go to ``workers`` local processes (1: run here, one after the other) or, with
    ``scheduler`` (an address or a scheduler file), to that Dask cluster. Raises RunRefused for an
    existing archive without ``force``, ValueError for bad arguments, SchedulerError for a scheduler
    that cannot be reached (all before the PDE runs and the archive is created: see
    :func:`check_fit_time` and :func:`check_particle_counts`).
    """
    from .archive import VALIDATE_COMMAND, replace_into, write_validation
    from .executor import open_pool
    from .runner import RunRefused, _prepare_pde, _run_pde, deferred_interrupt, new_archive
    from .streams import say

    log = log or say
    if config.pde is None or config.particles is None:
        raise ValueError("validate needs a configuration with both [pde] and [particles]")
    given = [int(v) for v in ns]
    ns = sorted(set(given))
    if len(ns) < len(given):
        log(f"[validate] --n: {sorted({v for v in given if given.count(v) > 1})} given more than once; "
            "each count runs once")
    if not ns or ns[0] < 1:
        raise ValueError("--n: give particle counts >= 1")
    if seeds < 1:
        raise ValueError("--seeds must be >= 1")
    out = Path(out)
    # everything that would stop the study once the PDE has run is refused before it (and the archive)
    check_study_size(config, ns, seeds)
    check_fit_time(config, at)
    check_particle_counts(config, ns)
    prepared = _prepare_pde(config)
    if out.exists() and not force:
        raise RunRefused(f"{out} exists; use --force to overwrite it")
    # connected (or refused) before the PDE runs
    pool = open_pool(workers, scheduler) if (workers > 1 or scheduler is not None) else None
    part = out.with_name(out.name + ".part")
    if part.exists():
        log(f"{part}: the unfinished archive of an earlier attempt; validate does not resume, so it is "
            "replaced and the study starts over")
    try:
        # the command marks the archive as a study, which `run --resume` and `info` tell apart (made_by)
        writer = new_archive(config, part, force=True, command=command or VALIDATE_COMMAND)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    try:
        pde = _run_pde(config, writer, False, False, log, prepared=prepared)
        if pde.stop_reason == "interrupted":
            writer.set_status("interrupted")
            raise KeyboardInterrupt
        base_seed = int(config.particles.seed)
        copts = _compare_opts(config)
        jobs = [(n, base_seed + s) for n in ns for s in range(seeds)]
        where = pool.description if pool is not None else "this process"
        log(f"[validate] {len(jobs)} particle runs (N in {ns}, {seeds} seed(s)) on {where}")
        results = []
        # largest first: the long jobs start early and the workers drain evenly
        order = sorted(jobs, key=lambda j: -j[0])
        if pool is None:
            for n, s in order:
                results.append(_job(pde, config.particles, n, s, copts))
                log(f"[validate] N = {n}, seed {s}: {results[-1]['wall']:.1f} s")
        else:
            futs = [pool.submit(_job, pde, config.particles, n, s, copts) for n, s in order]
            for _, r in pool.results(futs):
                results.append(r)
                log(f"[validate] N = {results[-1]['n']}, seed {results[-1]['seed']}: "
                    f"{results[-1]['wall']:.1f} s")
            # in the order of the jobs, not of their completion: the archive must not depend on it
            rank = {job: i for i, job in enumerate(order)}
            results.sort(key=lambda r: rank[(r["n"], r["seed"])])
        res = _assemble(results, ns, [base_seed + s for s in range(seeds)], at)
        write_validation(writer, res, results, copts, pde)
        writer.set_status("finished")
        writer.close()
        replace_into(part, out)
        res.path = out
        return res
    except KeyboardInterrupt:
        if pool is not None:
            pool.interrupt()            # the particle runs stop too when only this process was interrupted
        with deferred_interrupt():      # whichever stage it came in (also the step that ended the PDE run)
            writer.set_status("interrupted")
        raise
    finally:
        writer.close()
        if pool is not None:
            pool.close()


def common_snapshot_times(config: RunConfig) -> np.ndarray | None:
    """The snapshot times after t = 0 that the configuration's PDE and particles share (as
    ``solvers.comparison`` matches them: equal to 1e-9 relative); None when there are too many to list."""
    tp, tq = config.pde.snapshot_times(), config.particles.snapshot_times()
    if tp is None or tq is None:
        return None
    tp, tq = tp[1:], tq[1:]
    j = np.clip(np.searchsorted(tq, tp), 1, len(tq) - 1) if len(tq) > 1 else np.zeros(len(tp), dtype=int)
    near = np.minimum(np.abs(tq[j] - tp), np.abs(tq[j - 1] - tp)) if len(tq) > 1 else np.abs(tq[0] - tp)
    return tp[near <= 1e-9 * np.maximum(1.0, np.abs(tp))]


def check_fit_time(config: RunConfig, at: float | None) -> None:
    """ValueError unless the study can fit its slopes: a time ``at`` (--at) within both runs, and a
    snapshot time after t = 0 that the PDE and the particles share (at t = 0 the distances measure only
    the initial sampling, not the dynamics)."""
    pde, part = config.pde, config.particles
    tp, tq = pde.t_final, part.t_final
    if math.isinf(tp):
        raise ValueError(f"{config.source or 'configuration'}: pde.t_final = inf runs the PDE until its terminal "
                         "state is certified; validate fits at common snapshot times: give a finite pde.t_final")
    common = common_snapshot_times(config)
    if at is not None and not (math.isfinite(at) and 0 <= at <= min(tp, tq)):
        hint = f"; e.g. --at {common[-1]:g} (a snapshot time of both)" if common is not None and len(common) else ""
        raise ValueError(f"--at {at:g}: the time of the fit must be a finite number in [0, {min(tp, tq):g}] "
                         f"(pde.t_final = {tp:g}, particles.t_final = {tq:g}){hint}")
    if common is not None and not len(common):
        def saves(table: str, v: float | None) -> str:
            return f"{table}.save_every = {v:g}" if v is not None else f"{table}.save_every unset"
        raise ValueError(f"{config.source or 'configuration'}: the PDE (pde.t_final = {tp:g}, "
                         f"{saves('pde', pde.save_every)}) and the particles (particles.t_final = {tq:g}, "
                         f"{saves('particles', part.save_every)}) share no snapshot time after t = 0, "
                         "where the slopes would be fitted; set pde.save_every and particles.save_every to the "
                         "same value (or the same t_final in both tables)")


#: bytes held per particle run of a study besides its arrays: its task (a future and its arguments) and the
#: dict of its result, most of it the arrays' headers; a bound with room
TASK_BYTES = 4096.0


def check_study_size(config: RunConfig, ns: list[int], seeds: int) -> None:
    """ValueError (naming --seeds) when the study's tasks and results cannot all be held in memory: every
    particle run is submitted at once and its distances kept (len(ns) x seeds runs, each TASK_BYTES and
    its distances at every snapshot time, kept again in the assembled arrays)."""
    from .._memory import refuse_if_too_big

    part = config.particles
    every = part.save_every
    # the snapshot times of a particle run (the distances are kept at those common with the PDE, at most these)
    times = 2 if every is None else 2 + min(math.ceil(part.t_final / every), 1 << 53)
    runs = len(ns) * seeds
    try:
        refuse_if_too_big({f"{runs} particle runs ({len(ns)} N x {seeds} seeds), their tasks and distances held at "
                           f"once": runs * (TASK_BYTES + 2 * 8.0 * times * (len(METRICS) + 1))},
                          "lower --seeds (or give fewer --n)")
    except ValueError as e:
        raise ValueError(f"--seeds {seeds}: {str(e).replace('the run would need', 'the study would need')}") from None


def check_particle_counts(config: RunConfig, ns: list[int]) -> None:
    """ValueError (naming --n) for a particle count the particle runs would refuse, found before the PDE
    runs: the arguments that do not depend on N are checked by preparing the smallest run in full (its
    initial particles placed); what depends on N (the memory of the snapshots, the quadrature grid on
    S^2, ...) for every N, on stand-in positions (so that 10^6 particles are not sampled to be checked)."""
    from .config import check_memory, quadrature_count_problem
    from ..particles import prepare_spec

    d, spec = config.model.d, config.particles
    init = spec.init
    where = config.source or "configuration"
    for n in ns:
        problem = quadrature_count_problem(d, n) if init == "quadrature" else None
        if problem is not None:
            raise ValueError(f"--n {n}: {problem} ({where}: particles.init = 'quadrature')")
        # the perceptron at n particles at once (ConfigError, a ValueError, naming --n)
        check_memory(config, n, key_n=f"--n {n}")
    try:
        prepare_spec(dataclasses.replace(spec, n=ns[0]))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: [particles] with --n {ns[0]}: {e}") from None
    generic = dataclasses.replace(spec, n=None, init="random", density=None)
    for n in ns[1:]:
        # all on one point, a read-only view (no memory until the solver copies it, after the checks of
        # what depends on N alone, such as the memory of the snapshots)
        x0 = np.broadcast_to(np.eye(d)[0], (n, d))
        try:
            prepare_spec(generic, x0=x0)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}: [particles] with --n {n}: {e}") from None


def _assemble(results: list[dict], ns: list[int], seeds: list[int], at: float | None) -> ValidationResult:
    t = results[0]["t"]
    for r in results:
        if r["t"].shape != t.shape or not np.allclose(r["t"], t):
            raise RuntimeError("particle runs of different N ended at different times (a stopping rule?); "
                               "validate needs the same snapshot times for every N: remove [particles.stop]")
    if at is None:
        i = len(t) - 1
    else:
        i = int(np.argmin(np.abs(t - at)))
    dist = {}
    for k in METRICS:
        if results[0][k] is None:
            continue
        arr = np.full((len(ns), len(seeds), len(t)), np.nan)
        for r in results:
            arr[ns.index(r["n"]), seeds.index(r["seed"])] = r[k]
        dist[k] = arr
    slopes = {k: fit_slope(np.array(ns), v[:, :, i].mean(axis=1)) for k, v in dist.items()}
    head = f"distances to the PDE at t = {t[i]:.4g} (mean over {len(seeds)} seed(s))"
    if at is not None and not math.isclose(float(t[i]), at, rel_tol=1e-9, abs_tol=1e-12):
        # --at between snapshot times: the fit is at the nearest one, and the table says so
        head += f"; --at {at:g} is not a snapshot time: the nearest common snapshot is used"
    cols = list(dist)
    lines = [head, f"{'N':>9s} " + " ".join(f"{c:>12s}" for c in cols)]
    for a, n in enumerate(ns):
        lines.append(f"{n:9d} " + " ".join(f"{dist[c][a, :, i].mean():12.4e}" for c in cols))
    lines.append(f"{'slope':>9s} " + " ".join(f"{slopes[c]:12.3f}" for c in cols))
    if len(ns) < 2:
        lines.append("(no slope: it is fitted across particle counts, and --n gave one; give two or more)")
    return ValidationResult(n=np.array(ns), seeds=np.array(seeds), t=t, distances=dist, at=float(t[i]),
                            slopes=slopes, table="\n".join(lines))
