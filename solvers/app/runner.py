"""Running a configuration end to end into one archive: PDE, particles, comparison.

:func:`run_config` is what ``attnpde run`` does. Stages run in order (PDE, particles, comparison);
each appends its snapshots to the archive as it goes, and every ``checkpoint_interval`` seconds the state of
its current step. Ctrl-C (or SIGTERM in ``attnpde``) ends the current stage cleanly after its current step,
whose state the archive keeps (``stop_reason="interrupted"``, archive status "interrupted"); ``resume=True``
continues a killed or interrupted run from the latest state its archive holds for each unfinished stage
(a snapshot's, a checkpoint's or the interrupted step's) and ends at the same numbers as an uninterrupted run.
"""
from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .archive import (ArchiveDamaged, ArchiveFull, ArchiveWriter, Lock, libraries, made_by,
                      open_archive, read_restart, read_state, software_version, verify)
from .archive_schema import to_json
from .config import ConfigError, RunConfig, parse_config
from .executor import FORWARDED_SIGNAL as _FORWARDED_SIGNAL
from .streams import say

__all__ = ["run_config", "RunOutcome", "RunRefused", "RunFailed", "Progress"]


class RunRefused(RuntimeError):
    """The run cannot start as asked (existing archive, nothing to resume, different configuration)."""


class RunFailed(RuntimeError):
    """A stage failed after the archive was created (its status is then "failed", attr ``failure``)."""


@dataclass
class RunOutcome:
    path: Path
    status: str                       # "finished" or "interrupted"
    pde: Any = None                   # PDEResult
    particles: Any = None             # ParticleResult
    comparison: Any = None            # Comparison
    skipped: list = field(default_factory=list)


class Progress:
    """Progress of a stage as plain periodic lines (every ``every`` seconds) for a log or a pipe. On a
    terminal the solvers draw their own bar (``progress=True``): see :func:`progress_for`."""

    def __init__(self, stage: str, t_final: float, t0: float = 0.0, *, stream=None, every: float = 5.0,
                 log: Callable[[str], None] | None = None) -> None:
        self.stage, self.t_final, self.stream = stage, t_final, stream or sys.stderr
        # the run's log when given (a sweep member's prefixes its lines with its beta), else the stream
        self.emit = log or (lambda line: say(line, self.stream))
        self.every = every
        # the solver calls at most this often (and at each phase's start and end: solvers.stepping.Progress):
        # a line every `every` seconds needs no call after each step
        self.interval = min(every, 0.25)
        self.start = self.phase_start = time.perf_counter()
        self.t_start = t0
        self.phase = None
        self.last = -1e9

    def __call__(self, info: dict) -> None:
        t = float(info["t"])
        now = time.perf_counter()
        # the PDE's error-estimate rerun (info "check") goes over [t_handoff, t_final] again: the estimate of
        # the time left is that of the phase, timed from its first step
        phase = info.get("check")
        if phase != self.phase or t < self.t_start:
            if phase is not None and phase != self.phase:
                end = float(info.get("t_end", self.t_final))
                self.emit(f"[{self.stage}] error estimate: the continuation again from its handoff, with {phase}, "
                          + ("to its own certified end" if math.isinf(end) else f"to t = {end:g}"))
            self.phase, self.phase_start, self.t_start = phase, now, t
        # the phase ends at t_final, or where the info says (the rerun of a run that stopped earlier)
        end = float(info.get("t_end", self.t_final))
        # called after every step: return before any formatting unless a line is due
        if now - self.last < self.every and t < end:
            return
        self.last = now
        extra = " ".join(f"{k}={_fmt(info[k])}" for k in ("check", "dt", "degree", "nodes", "diffuse", "nsteps",
                                                          "n_clusters") if k in info)
        if math.isinf(end):
            # a run to its certified end: no fraction to estimate from
            self.emit(f"[{self.stage}] t={t:.6g} (until certified) {extra} elapsed {now - self.start:.0f}s")
            return
        frac = (t - self.t_start) / max(end - self.t_start, 1e-300)
        # below 1% of the phase the rate is that of its first steps (often far from the mean): no estimate
        eta = f"{(now - self.phase_start) * (1 - frac) / frac:.0f}s" if frac >= 0.01 else "?"
        self.emit(f"[{self.stage}] t={t:.6g}/{end:g} ({100 * t / end:.1f}%) {extra} "
                  f"elapsed {now - self.start:.0f}s eta {eta}")


def progress_for(stage: str, t_final: float, t0: float, tty: bool | None, log: Callable[[str], None] | None = None):
    """The ``progress`` argument of a solver for a stage: True (its own bar) on a terminal, else plain lines
    (through ``log`` when given)."""
    tty = sys.stderr.isatty() if tty is None else tty
    return True if tty else Progress(stage, t_final, t0, log=log)


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


@contextlib.contextmanager
def deferred_interrupt():
    """Hold Ctrl-C until the block ends (so an archive write is never cut in half); then raise it.

    The handler in place is called at once and its KeyboardInterrupt held: a pool worker's handler
    records the interrupt (so that its queued tasks do not start) and decides whether it interrupts
    (``solvers.app.executor``); the signal a pool forwards to its workers is held the same way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit, saved = [], {}

    def held(signum, frame):
        old = saved[signum]
        if old is signal.SIG_IGN or old is None:
            return
        if not callable(old):                       # SIG_DFL: what Ctrl-C would have ended
            hit.append(signum)
            return
        try:
            old(signum, frame)
        except KeyboardInterrupt:
            hit.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, _FORWARDED_SIGNAL):     # SIGTERM: as attnpde handles it
        old = signal.getsignal(sig)
        if sig == signal.SIGINT or callable(old):
            saved[sig] = old
            signal.signal(sig, held)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        if hit:
            raise KeyboardInterrupt


def deferred_interrupt_if(write: bool):
    """:func:`deferred_interrupt` around a snapshot callback that writes to the archive; nothing around one
    that only buffers its snapshot (installing a signal handler for each snapshot costs time)."""
    return deferred_interrupt() if write else contextlib.nullcontext()


def _differences(a: dict, b: dict, path: str = "") -> list[str]:
    """The keys whose values differ between the archive's configuration ``a`` and the given one ``b``
    ("model.noise: 0.0 in the archive, absent in the configuration"). A key written in one and left to its
    default in the other differs: the comparison is of what was written."""
    out = []
    def show(d, k):
        return repr(d[k]) if k in d else "absent"
    for k in sorted(set(a) | set(b)):
        p = f"{path}.{k}" if path else k
        if k in a and k in b and isinstance(a[k], dict) and isinstance(b[k], dict):
            out += _differences(a[k], b[k], p)
        elif k not in a or k not in b or a[k] != b[k]:
            out.append(f"{p}: {show(a, k)} in the archive, {show(b, k)} in the configuration")
    return out


#: [run] keys a resume may change: how often the archive is written, which changes no number of the run
RESUME_MAY_CHANGE = ("run.checkpoint_interval", "run.flush_interval")


def _without_resume_settings(raw: dict) -> dict:
    """``raw`` without the keys of :data:`RESUME_MAY_CHANGE` (a table they leave empty: absent)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for key in RESUME_MAY_CHANGE:
        table, name = key.split(".")
        if isinstance(out.get(table), dict):
            out[table].pop(name, None)
            if not out[table]:
                del out[table]
    return out


def resume_differences(archived: dict, given: dict) -> tuple[list[str], list[str]]:
    """(the differences between the archive's configuration ``archived`` and ``given`` that refuse a resume,
    those it may make: :data:`RESUME_MAY_CHANGE`), each as :func:`_differences` words it."""
    refuse = _differences(_without_resume_settings(archived), _without_resume_settings(given))
    allowed = []
    for key in RESUME_MAY_CHANGE:
        table, name = key.split(".")
        a, b = archived.get(table, {}), given.get(table, {})
        allowed += _differences({name: a[name]} if name in a else {}, {name: b[name]} if name in b else {}, table)
    return refuse, allowed


def check_resumable(path: Path, config: RunConfig, command: str = "") -> list[str]:
    """Refuse (RunRefused/ArchiveError) unless ``path`` is an unfinished run of the same configuration,
    written by the same kind of command as ``command`` (:func:`~solvers.app.archive.made_by`), that proves
    it can be continued: whole (``archive.verify``), with a restart state for every unfinished stage that
    holds rows, that state consistent with its rows and the configuration (:func:`_restart_problems`; the
    solvers check its settings again as they start), and the options as this version resolves them equal
    to those the run resolved (a default changed between versions would make the resumed run another run). A study of
    ``attnpde validate`` does not resume, and a sweep's member resumes with its sweep. Returns the
    differences a resume may make (:data:`RESUME_MAY_CHANGE`), for the caller to say."""
    path = Path(path)
    restarts, options = {}, {}
    with open_archive(path) as f:
        status = str(f.attrs.get("status", ""))
        text = str(f.attrs.get("config", ""))
        origin = made_by(str(f.attrs.get("command", "")))
        made = str(f.attrs.get("software_version", "?"))
        if origin == "validate":
            raise RunRefused(f"{path}: written by `attnpde validate`, which does not resume; the same validate "
                             "command again starts the study over (with --force where its archive exists)")
        if origin == "sweep" and made_by(command) != "sweep":
            raise RunRefused(f"{path}: a member of `attnpde sweep`; resume it with the sweep's own command and "
                             "--resume (its configuration, --beta list and --out folder)")
        if status == "finished":
            raise RunRefused(f"{path}: the run is already finished; nothing to resume "
                             "(use --force to start it again from scratch)")
        try:
            archived = parse_config(text, str(path))
        except ConfigError as e:
            raise ArchiveDamaged(f"{path}: damaged archive: its configuration does not parse ({e})") from None
        pde = f.get("pde")
        if pde is not None and not bool(pde.attrs.get("complete", False)) and "restart" in pde:
            try:
                grids = pde["grids"][()] if "grids" in pde else None
            except (OSError, RuntimeError) as e:
                raise ArchiveDamaged(f"{path}: damaged archive: /pde/grids cannot be read ({e})") from None
            _check_grids(path, config, grids)
        verify(f, path)                  # (a root annotation changed by hand does not stop a resume)
        diff, allowed = resume_differences(archived.raw, config.raw)
        if diff:
            more = f"; and {len(diff) - 8} more" if len(diff) > 8 else ""
            raise RunRefused(f"{path}: was made with a different configuration ({len(diff)} difference(s); a key "
                             "given in one and left to its default in the other counts): " + "; ".join(diff[:8])
                             + more)
        for stage in ("pde", "particles"):
            g = f.get(stage)
            if getattr(config, stage) is None or g is None or bool(g.attrs.get("complete", False)):
                continue
            rows = g["t"].shape[0] if "t" in g else 0
            if "restart" not in g or "state" not in g["restart"].attrs:
                if rows:
                    raise ArchiveDamaged(f"{path}: damaged archive: /{stage} holds {rows} snapshot rows but no "
                                         "restart state to continue from; start the run again with --force")
                continue
            problems = _restart_problems(g, stage, config)
            if problems:
                raise ArchiveDamaged(f"{path}: damaged archive: the restart state of /{stage} does not fit the "
                                     "rest: " + "; ".join(problems))
            restarts[stage] = True
            # the spec the run resolved (archives before /pde@spec: its options)
            options[stage] = json.loads(str(g.attrs.get("spec", g.attrs.get("options", "{}"))))
    for stage in restarts:
        # the spec this version resolves from the same configuration
        changed = _option_differences(options[stage], getattr(config, stage).to_dict())
        if changed:
            raise RunRefused(f"{path}: attnpde {made} started this run with other defaults than this version's "
                             f"({software_version()}): " + "; ".join(f"{stage}.{c}" for c in changed)
                             + f"; the resumed run would not be the same run: resume it with attnpde {made}, or "
                             "start it again with --force")
    return allowed


def _restart_problems(g, stage: str, config: RunConfig) -> list[str]:
    """What is wrong with the committed restart state of ``g`` (stage ``stage``) for a resume of ``config``:
    its arrays present and finite, its time that of its last snapshot or after it (a checkpoint, an
    interruption) and within the run, its shapes those of the stage."""
    out = []
    state, restart = read_state(g["restart"]), read_restart(g)
    t, last = restart.get("t"), restart.get("last_snapshot_t", restart.get("t"))
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (t, last)):
        return [f"its time ({t!r}, last snapshot {last!r}) is not a finite number"]
    n = int(state.get("snapshots", 0))
    if not 1 <= n <= g["t"].shape[0]:
        out.append(f"it continues after {n} snapshots, /{stage}/t holds {g['t'].shape[0]}")
    else:
        tn = float(g["t"][n - 1])
        if tn != last:
            out.append(f"its last snapshot is at t = {last!r}, /{stage}/t[{n - 1}] = {tn!r}")
    t_final = float(getattr(config, stage).t_final)
    if not last <= t <= t_final:
        out.append(f"its time t = {t!r} is not between its last snapshot ({last!r}) and t_final ({t_final!r})")
    for k, v in restart.items():
        if isinstance(v, np.ndarray) and v.dtype.kind in "fc" and not np.all(np.isfinite(v)):
            out.append(f"its array {k} holds values that are not finite")
    d = config.model.d
    if stage == "pde":
        space = config.pde.space
        lagrangian = restart.get("phase") == "lagrangian"
        # the spectral state (past the handoff: the handoff's, which the continuation's error estimate reruns)
        key, degree = (("handoff_coeffs", (restart.get("handoff") or {}).get("degree")) if lagrangian
                       else ("coeffs", restart.get("degree")))
        c = restart.get(key)
        if c is None or c.ndim != 1 or degree is None or c.size != space.ncoef(int(degree)):
            out.append(f"its {key} ({None if c is None else c.shape}) do not match its degree {degree}")
        if lagrangian and not _nodes_ok(restart, d):
            out.append("its node measure is not (n, d) positions with n weights and counts")
    else:
        x, w = restart.get("x"), restart.get("w")
        n_w = g["w"].shape[0] if "w" in g else None
        if x is None or w is None or x.shape != (n_w, d) or w.shape != (n_w,):
            out.append(f"its particles ({None if x is None else x.shape}) are not the stage's {n_w} in R^{d}")
    return out


def _nodes_ok(restart: dict, d: int) -> bool:
    x, w, count = restart.get("x"), restart.get("w"), restart.get("count")
    return (x is not None and w is not None and count is not None and x.ndim == 2 and x.shape[1] == d
            and w.shape == (x.shape[0],) and count.shape == (x.shape[0],))


def _option_differences(archived: dict, now: dict) -> list[str]:
    """The options whose value this version resolves differently from the archive's record ("nodes: 4096 in
    the archive, 8192 now"). A value the archive left to a default (None: written before options were
    resolved) is not compared; ``now``, a spec's plain values, as the archive's JSON reads back."""
    now = json.loads(to_json(now))
    return [f"{k}: {archived[k]!r} in the archive, {v!r} now" for k, v in now.items()
            if archived.get(k) is not None and archived[k] != v]


def particle_settings(prepared) -> dict:
    """The particle stage's settings as the run resolves them, recorded in /particles@options: its spec
    (``ParticleSpec.to_dict``: every default filled in), the count placed and the interaction sums "auto"
    picked (``sum_method``)."""
    return {**prepared.spec.to_dict(), "n": int(prepared.N), "sum_method": prepared.sum_method}


def _check_grids(path: Path, config: RunConfig, grids) -> None:
    """Refuse to resume a PDE run whose computational grids differ from the ones this machine and version
    would use: the continuation would not be the uninterrupted run."""
    space = config.pde.space
    advice = "start it again with --force (the finished part would be recomputed)"
    if grids is None:
        if config.model.d == 3:
            raise RunRefused(f"{path}: the archive records no computational grids (written before attnpde "
                             "fixed the sphere's grid by the degree, when SHTns picked it by the machine's SIMD "
                             f"width): resuming could continue on another grid; {advice}")
        return
    for row in np.asarray(grids, dtype=np.int64):
        degree, sizes = int(row[0]), tuple(int(v) for v in row[1:])
        here = tuple(space.computational_grid(degree))
        if here != sizes:
            raise RunRefused(f"{path}: the PDE ran at degree {degree} on the grid {sizes}; this machine and "
                             f"version would use {here}, so the resumed run would not be the uninterrupted one; "
                             f"{advice}")


def new_archive(config: RunConfig, out: Path, *, force: bool, command: str, hint: str = "") -> ArchiveWriter:
    """A new archive for ``config`` at ``out`` (refused if it exists, unless ``force``), with the [run]
    table's compression and flush interval. ``hint`` is added to the refusal's advice. The archive's lock
    is taken before the file is touched: an archive another process holds is refused (ArchiveInUse) and
    left as it was, even with ``force``."""
    if out.exists() and not force:
        raise RunRefused(f"{out} exists; use --force to overwrite it{hint}")
    out.parent.mkdir(parents=True, exist_ok=True)
    return ArchiveWriter(out, "create", config_text=config.text, name=config.name, command=command,
                         model=config.model, compression=config.compression, flush_interval=config.flush_interval)


def run_config(config: RunConfig, out: str | Path, *, resume: bool = False, force: bool = False,
               command: str = "", progress: bool | None = None, log: Callable[[str], None] | None = None
               ) -> RunOutcome:
    """Run every stage of ``config`` into the archive ``out`` (see the module docstring).

    Raises RunRefused / ArchiveError before doing any work when the archive situation is wrong.
    """
    out = Path(out)
    log = log or say
    # a fresh PDE stage is prepared (its initial state built and checked) before the archive exists, so
    # that a refusal neither creates nor, with --force, replaces one
    prepared = _prepare_pde(config) if config.pde is not None and not resume else None
    prepared_particles = _prepare_particles(config) if config.particles is not None and not resume else None
    if resume:
        if not out.exists():
            raise RunRefused(f"{out}: no archive to resume (run without --resume to start)")
        # the lock first: nothing changes the archive between its checks and the run
        lock = Lock(out, exclusive=True)
        try:
            changes = check_resumable(out, config, command)
            writer = ArchiveWriter(out, "resume", command=command, lock=lock, flush_interval=config.flush_interval)
        except BaseException:
            lock.release()
            raise
        for change in changes:
            log(f"[resume] {change} (how often the archive is written: the resume uses the configuration's)")
        _note_libraries(writer, log)
        if changes:
            # every resume's changes kept (the archive's config stays the start's, which each compares with)
            earlier = str(writer.f.attrs.get("resumed_with", ""))
            here = f"resume {int(writer.f.attrs.get('resumed', 1))}: " + "; ".join(changes)
            writer.annotate(resumed_with=f"{earlier} | {here}" if earlier else here)
    else:
        writer = new_archive(config, out, force=force, command=command, hint=" or --resume to continue it")
    if not writer.lock.locked and not writer.lock.shared_with_self:
        log(f"[archive] {out}: this file system takes no file locks (NFS without a lock manager?): nothing stops "
            "another process from writing or replacing the archive while this run writes it")
    outcome = RunOutcome(path=out, status="running")
    try:
        if config.pde is not None and not _complete(writer, "pde", outcome, log):
            outcome.pde = _run_pde(config, writer, resume, progress, log, prepared=prepared)
            if outcome.pde.stop_reason == "interrupted":
                return _interrupted(writer, outcome)
        if config.particles is not None and not _complete(writer, "particles", outcome, log):
            outcome.particles = _run_particles(config, writer, resume, progress, log, prepared=prepared_particles)
            if outcome.particles.stop_reason == "interrupted":
                return _interrupted(writer, outcome)
        if config.compare is not None:
            outcome.comparison = _run_comparison(writer, config)
        writer.set_status("finished")
        outcome.status = "finished"
        return outcome
    except KeyboardInterrupt:
        return _interrupted(writer, outcome)
    except ArchiveFull as full:
        # out of space: an ordinary failure; the archive is as its last commit left it
        e = full.strerror or str(full)
        writer.annotate(failure=f"out of space: {e}")
        status = "failed" if writer.set_status("failed") else f"still {writer.status_written!r}: no room to change it"
        kept = "; ".join(f"{s} to t = {t:.6g}" for s in ("pde", "particles")
                         if (t := writer.committed_t(s)) is not None) or "no snapshot"
        raise RunFailed(f"{e}; the archive keeps {kept} (status {status}); make room, then continue with --resume") \
            from None
    except (ValueError, MemoryError, OSError, RuntimeError) as e:
        # what the checks before the archive could not foresee: the archive says so, and keeps what it holds
        reason = f"{type(e).__name__}: {e}"
        writer.annotate(failure=reason)
        written = writer.set_status("failed")
        raise RunFailed(f"{out}: the run failed ({reason}); the archive keeps what was written, status "
                        + ("'failed'" if written else f"{writer.status_written!r} (no room to change it)")) from e
    finally:
        writer.close()


def _note_libraries(writer: ArchiveWriter, log) -> None:
    """A resume with other library versions, on another CPU or by another version of attnpde than the
    run's start continues the same grids and steps, but its round-off may differ from the uninterrupted
    run's (the libraries' kernels; this package's own fixed choices, such as the NUFFT's upsampling
    factor): say so, and keep both."""
    here, then = libraries(), writer.f.attrs.get("libraries")
    if then is not None and str(then) != here:
        log(f"[resume] the run was started with: {then}\n[resume] it continues with:   {here}\n"
            "[resume] the resumed part agrees with an uninterrupted run to round-off, not bit for bit")
        writer.annotate(libraries_resumed=here)
    mine, made = software_version(), writer.f.attrs.get("software_version")
    if made is not None and str(made) != mine:
        log(f"[resume] the run was started by attnpde {made} and continues with attnpde {mine}: the resumed part "
            "agrees with an uninterrupted run to round-off, not bit for bit")
        writer.annotate(software_resumed=mine)


def _complete(writer: ArchiveWriter, stage: str, outcome: RunOutcome, log) -> bool:
    """Whether the archive holds the stage complete already (a resumed run skips it, and says so)."""
    g = writer.f.get(stage)
    if g is None or not bool(g.attrs.get("complete", False)):
        return False
    outcome.skipped.append(stage)
    log(f"[{stage}] already complete in the archive: skipped")
    return True


def _interrupted(writer: ArchiveWriter, outcome: RunOutcome) -> RunOutcome:
    with deferred_interrupt():              # a second Ctrl-C waits for the status to be written
        writer.set_status("interrupted")
    outcome.status = "interrupted"
    return outcome


def _prepare_pde(config: RunConfig):
    """The PDE of ``config`` prepared (``pde.prepare_spec``), or RunRefused naming the table."""
    from ..pde import prepare_spec

    try:
        return prepare_spec(config.pde)
    except (ValueError, TypeError) as e:
        raise RunRefused(f"{config.source or 'configuration'}: [pde]: {e}") from None


def _initial_text(initial: dict) -> str:
    """An [initial] table as a reader would write it: 'von_mises (mu = [1, 0], kappa = 2)'."""
    def plain(v):           # every digit a float needs (repr), integers without a decimal point
        v = np.asarray(v)
        def item(x):
            return repr(float(x)).removesuffix(".0") if v.dtype.kind in "fiu" else str(x)
        return "[" + ", ".join(item(x) for x in v.ravel().tolist()) + "]" if v.ndim else item(v.item())
    rest = ", ".join(f"{k} = {plain(v)}" for k, v in initial.items() if k != "kind")
    kind = str(initial.get("kind", "uniform"))
    return f"{kind} ({rest})" if rest else kind


def _resume_point(restart: dict) -> str:
    """Where a resume continues: the last snapshot, or a state kept after it (where an interruption stopped
    the run, or its last checkpoint)."""
    t, last = float(restart["t"]), restart.get("last_snapshot_t")
    if last is not None and t > float(last):
        return f"t = {t:.6g} (a state kept after the last snapshot, at t = {float(last):.6g})"
    return f"the snapshot at t = {t:.6g}"


def _run_pde(config: RunConfig, writer: ArchiveWriter, resume: bool, progress, log, prepared=None):
    spec = config.pde
    degree, t_final, save_every = spec.degree, spec.t_final, spec.save_every
    restart = writer.truncate_to_restart("pde") if resume else None
    if restart is not None:
        from ..pde import prepare_spec
        prepared = prepare_spec(spec, restart)
    elif prepared is None:
        prepared = _prepare_pde(config)
    if restart is None:
        if resume:
            log("[pde] the archive holds no snapshot of this stage: it starts from t = 0")
        with deferred_interrupt():
            writer.pde_begin(prepared.grid, spec.options_dict(), "uniform" if spec.initial == "uniform" else
                             f"[initial] {_initial_text(config.initial)}", spec=spec.to_dict())
        log(f"[pde] S^{config.model.d - 1}, degree {degree}, t_final {t_final}, "
            + (f"save_every {save_every}" if save_every else "snapshots at t = 0 and t_final (no save_every)")
            + f"; the state is kept every {config.checkpoint_interval:g} s (checkpoint_interval)"
            + ("; past a handoff to the node continuation, the continuation runs a second time with twice the "
               "nodes for the atoms' error bars (error_estimate = false skips it)"
               if prepared.continues and prepared.opts.error_estimate else ""))
    else:
        log(f"[pde] resuming from {_resume_point(restart)} (degree {restart['degree']})")
    bar = progress_for("pde", t_final, float(restart["t"]) if restart else 0.0, progress, log)

    def snapshot(snap):
        with deferred_interrupt_if(writer.write_due()):
            writer.pde_snapshot(snap)

    def checkpoint(cp):
        with deferred_interrupt():
            writer.pde_checkpoint(cp)

    result = prepared.run(progress=bar, callback=snapshot, checkpoint=checkpoint,
                          checkpoint_every=config.checkpoint_interval)
    with deferred_interrupt():
        writer.pde_finish(result)
    log(f"[pde] {result.stop_reason} at t = {result.t_stop:.6g}: {result.message} "
        f"({result.step_counts()}, {result.wall_time:.1f} s)")
    _stop_if_requested(prepared, result, config.particles is not None or config.compare is not None)
    return result


def _stop_if_requested(prepared, result, more: bool) -> None:
    """A Ctrl-C that came in the step that ended the stage for a reason of its own (t_final, a stop
    reason): the stage is complete and written; the command stops before the next stage, if ``more``."""
    if more and prepared.stop_request and result.stop_reason != "interrupted":
        raise KeyboardInterrupt


def _run_comparison(writer: ArchiveWriter, config: RunConfig):
    """Compare the archived PDE and particle runs (``solvers.compare`` with the [compare] table) and write
    /comparison."""
    from ..comparison import compare
    from .archive import write_comparison
    from .archive_reader import read_archive

    writer.write_pending()
    run = read_archive(writer.f, writer.path)          # through the writer's own file (its lock)
    cmp = compare(run.pde, run.particles, with_concentration=True, **(config.compare or {}))
    write_comparison(writer, cmp, config.model.d)
    return cmp


def _prepare_particles(config: RunConfig):
    """The particles of ``config`` prepared (``particles.prepare_spec``), or RunRefused naming the table."""
    from ..particles import prepare_spec

    try:
        return prepare_spec(config.particles)
    except (ValueError, TypeError) as e:
        raise RunRefused(f"{config.source or 'configuration'}: [particles]: {e}") from None


def _run_particles(config: RunConfig, writer: ArchiveWriter, resume: bool, progress, log, prepared=None):
    t_final = config.particles.t_final
    restart = writer.truncate_to_restart("particles") if resume else None
    if restart is not None:
        # the restart state carries the particles; the rest of the settings are those of the run
        log(f"[particles] resuming from {_resume_point(restart)}")
    else:
        if resume:
            log("[particles] the archive holds no snapshot of this stage: it starts from t = 0")
        log(f"[particles] N = {config.particles.n} on S^{config.model.d - 1}, t_final {t_final}")
    if restart is not None:
        from ..particles import prepare_spec
        prepared = prepare_spec(config.particles, restart=restart)
    elif prepared is None:
        prepared = _prepare_particles(config)
    bar = progress_for("particles", t_final, float(restart["t"]) if restart else 0.0, progress, log)
    state = {"begun": restart is not None}

    def snapshot(snap):
        # the first snapshot opens /particles; a later one writes when it completes a batch
        with deferred_interrupt_if(not state["begun"] or writer.write_due()):
            if not state["begun"]:
                r = snap["restart"]
                writer.particles_begin(r["w"], particle_settings(prepared), str(r["initial"]))
                state["begun"] = True
            writer.particles_snapshot(snap)

    def checkpoint(cp):
        with deferred_interrupt():
            writer.particles_checkpoint(cp)

    result = prepared.run(progress=bar, callback=snapshot, checkpoint=checkpoint,
                          checkpoint_every=config.checkpoint_interval)
    with deferred_interrupt():
        writer.particles_finish(result)
    log(f"[particles] {result.stop_reason} at t = {result.t_stop:.6g}: {result.message} "
        f"({result.nsteps} steps, {result.wall_time:.1f} s)")
    _stop_if_requested(prepared, result, config.compare is not None)
    return result
