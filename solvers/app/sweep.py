"""``attnpde sweep``: one archive per beta, run in parallel processes (the main paper's Figure 9 protocol).

Each member is the configuration with ``model.beta`` replaced (and ``run.name`` suffixed), written as its
own archive ``<out>/<name>_beta<beta>.h5``; the sweep prints a table (:func:`table`: beta, sqrt(beta), and per
solver the atoms or clusters, the largest mass, how and when it ended), writes it as ``summary.json`` and
draws what varies against sqrt(beta) (:func:`plot_sweep`: the counts, every mass, the time to the end).

The members run on a :class:`~solvers.app.executor.TaskPool`: local processes, or the workers of a Dask
cluster (``--scheduler``). A member writes ``<name>_beta<beta>.h5.part`` and renames it (``os.replace``,
atomic on one file system) to its final name once its status is "finished", so a member's archive is
complete or absent, whatever happens to the process that wrote it. A ``.part`` left by a killed or
interrupted member is continued by ``--resume`` (the runner's resume: the same numbers as an
uninterrupted run), kept as it is when it had finished (stopped before its rename), or, when it cannot be
resumed (cut in the middle of a write), started again; a task
the cluster runs again after losing its worker starts its ``.part`` afresh. On a cluster the output
directory must be one shared file system, at the same path, on every worker.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Callable

import numpy as np

from .config import ConfigError, RunConfig, parse_config

__all__ = ["parse_list", "sweep", "member_config", "partial_path", "plot_sweep", "table", "FIGURE"]

#: the sweep's figure, in its output directory
FIGURE = "clusters_vs_sqrt_beta.png"


def parse_list(text: str, what: str, example: str = "1,5,25") -> list[float]:
    """'1,5,25' -> [1.0, 5.0, 25.0]; refuses empty, non-numeric, negative or non-finite entries (``example``:
    a valid list, for the message)."""
    vals = []
    for tok in text.split(","):
        tok = tok.strip()
        try:
            v = float(tok)
        except ValueError:
            raise ValueError(f"{what}: {tok!r} is not a number (give comma-separated values, e.g. {example})") from None
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{what}: values must be finite and >= 0, got {tok!r}")
        vals.append(v)
    if not vals:
        raise ValueError(f"{what}: give at least one value")
    return vals


def member_config(config: RunConfig, beta: float) -> RunConfig:
    """The member of ``config`` at ``beta``: its model and specs with beta replaced (``RunConfig.with_beta``),
    named ``<name>_beta<beta>``."""
    name = config.name or "sweep"
    try:
        return config.with_beta(beta, f"{name}_beta{beta:g}", f"{config.source} (beta = {beta:g})")
    except ConfigError as e:
        raise ConfigError(e.path, f"{e.detail} (sweep member beta = {beta:g})") from None


def _log(beta: float) -> Callable[[str], None]:
    from .streams import say
    return lambda s: say(f"[beta={beta:g}] {s}")


def partial_path(path: Path) -> Path:
    """Where a member's archive is written until it is complete: ``NAME.h5.part`` beside ``NAME.h5``
    (the same directory, hence the same file system, so that the final rename is atomic)."""
    return path.with_name(path.name + ".part")


def _resumable(part: Path, cfg: RunConfig, log: Callable[[str], None]) -> bool:
    """Whether the unfinished member archive ``part`` can be continued; if not (damaged by a kill in the
    middle of a write, or from another configuration) it is only a temporary file, and is started again."""
    from .archive import SWEEP_COMMAND, ArchiveError, ArchiveInUse
    from .runner import RunRefused, check_resumable

    try:
        check_resumable(part, cfg, SWEEP_COMMAND)
    except ArchiveInUse:
        raise                           # another process's: neither continued nor started again here
    except (RunRefused, ArchiveError, OSError) as e:
        log(f"{part}: cannot be continued ({e}); starting the member again")
        return False
    return True


def _finished_config(path: Path) -> dict | None:
    """The configuration (``RunConfig.raw``) of the archive ``path`` if it is finished, else None;
    ArchiveError if it is no archive, or its configuration does not parse."""
    from .archive import ArchiveError, open_archive

    with open_archive(path) as f:
        status, text = str(f.attrs.get("status", "")), str(f.attrs.get("config", ""))
    if status != "finished":
        return None
    try:
        return parse_config(text, str(path)).raw
    except ConfigError as e:
        raise ArchiveError(f"{path}: damaged archive: its configuration does not parse ({e})") from None


def _finished(part: Path, cfg: RunConfig) -> bool:
    """Whether the member archive ``part`` is finished, from the configuration ``cfg``."""
    from .archive import ArchiveError
    from .runner import resume_differences

    try:
        archived = _finished_config(part)
    except (ArchiveError, OSError):
        return False
    return archived is not None and not resume_differences(archived, cfg.raw)[0]


def _member(cfg: RunConfig, out: str, resume: bool) -> dict:
    """Run one member into ``out`` through its ``.part`` file (module docstring); returns its summary row."""
    from .archive import SWEEP_COMMAND, replace_into
    from .runner import run_config

    log = _log(cfg.model.beta)
    path = Path(out)
    part = partial_path(path)
    if resume and path.exists():
        # an unfinished archive under the final name (written before members used .part files): the
        # sweep's checks found it resumable; it continues under the temporary name
        os.replace(path, part)
    if resume and part.exists() and _finished(part, cfg):
        # finished, but stopped before its rename (a Ctrl-C while the archive closed): complete, kept as it is
        replace_into(part, path)
        log(f"{part}: finished before the sweep stopped; kept as {path.name}")
        return _row(cfg.model.beta, path, "finished")
    resume_this = resume and part.exists() and _resumable(part, cfg, log)
    # force=True on the .part only: whether the final archive may be replaced was decided by the sweep
    # before any member started; a .part is ours to overwrite (a killed attempt of this very task)
    outcome = run_config(cfg, part, resume=resume_this, force=True, progress=False, log=log,
                         command=f"{SWEEP_COMMAND} (member beta = {cfg.model.beta:g})")
    if outcome.status != "finished":
        return {"beta": cfg.model.beta, "archive": str(part), "status": outcome.status}
    # not over an archive another process holds (ArchiveInUse: the finished .part stays, --resume renames it)
    replace_into(part, path)
    return _row(cfg.model.beta, path, outcome.status)


def _row(beta: float, path: Path, status: str) -> dict:
    """The summary row of a member from its archive: per solver its end (reason, time, certified), its atoms
    (PDE: the certified terminal atoms, else the node groups or basins; particles: the clusters at the end)
    with mass >= 0.01 counted, and all their masses."""
    from .archive import load

    run = load(path)
    row = {"beta": beta, "archive": str(path), "status": status}
    if run.pde is not None:
        terminal = getattr(run.pde, "terminal", None)
        masses = np.asarray(terminal.masses if terminal is not None else run.atoms.get("pde", (None, np.zeros(0)))[1])
        row.update(pde_stop=run.pde.stop_reason, pde_t=float(run.pde.t_stop), pde_atoms=int(np.sum(masses >= 0.01)),
                   pde_certified=terminal is not None, pde_masses=sorted((float(m) for m in masses), reverse=True),
                   pde_max_mass=float(masses.max()) if len(masses) else float("nan"))
    if run.particles is not None:
        masses = np.asarray(run.atoms.get("particles", (None, np.zeros(0)))[1])
        row.update(particles_stop=run.particles.stop_reason, particles_t=float(run.particles.t_stop),
                   clusters=int(np.sum(masses >= 0.01)), clusters_all=int(len(masses)),
                   particle_masses=sorted((float(m) for m in masses), reverse=True),
                   max_cluster_mass=float(masses.max()) if len(masses) else float("nan"))
    return row


def table(rows: list[dict]) -> str:
    """The sweep's table: beta, sqrt(beta), and for each solver that ran its count of atoms (PDE) or clusters
    (particles) of mass >= 0.01, the largest mass, and how and when it ended."""
    pde = any("pde_atoms" in r for r in rows)
    part = any("clusters" in r for r in rows)
    head = f"{'beta':>8s} {'sqrt(beta)':>10s}"
    if pde:
        head += f" {'PDE atoms':>9s} {'max mass':>8s}  {'PDE end':<24s}"
    if part:
        head += f" {'clusters':>8s} {'max mass':>8s}  particles end"
    lines = [head]

    def mass(v) -> str:
        return f"{v:8.3f}" if isinstance(v, (int, float)) and math.isfinite(v) else f"{'-':>8s}"

    for r in rows:
        line = f"{r['beta']:8g} {math.sqrt(r['beta']):10.3f}"
        if pde:
            end = (f"{r['pde_stop']} at t = {r['pde_t']:.4g}" if "pde_stop" in r else r.get("status", "-"))
            line += f" {r.get('pde_atoms', '-')!s:>9s} {mass(r.get('pde_max_mass'))}  {end:<24s}"
        if part:
            end = (f"{r['particles_stop']} at t = {r['particles_t']:.4g}" if "particles_stop" in r
                   else r.get("status", "-"))
            line += f" {r.get('clusters', '-')!s:>8s} {mass(r.get('max_cluster_mass'))}  {end}"
        lines.append(line)
    return "\n".join(lines)


def _check_members(members: list[RunConfig], paths: list[Path], resume: bool) -> list[bool]:
    """Refuse (RunRefused, ArchiveError) before any member starts what one member would refuse once the
    others run: a configuration the new beta makes invalid, an archive that cannot be resumed. Returns,
    per member, whether its archive is already finished (with --resume: skipped, not refused)."""
    from .archive import SWEEP_COMMAND
    from .runner import RunRefused, _prepare_particles, _prepare_pde, check_resumable, resume_differences

    finished = []
    for m, p in zip(members, paths):
        if resume and p.exists():
            archived = _finished_config(p)
            if archived is not None:
                if resume_differences(archived, m.raw)[0]:
                    raise RunRefused(f"{p}: is finished, but was made with another configuration than "
                                     f"{m.source}; use --force to run it again")
                finished.append(True)
                continue
            check_resumable(p, m, SWEEP_COMMAND)
        else:
            # as the run prepares them (and refuses) before creating its archive
            if m.pde is not None:
                _prepare_pde(m)
            if m.particles is not None:
                _prepare_particles(m)
        finished.append(False)
    return finished


def sweep(config: RunConfig, betas: list[float], out_dir: Path, *, workers: int = 2, resume: bool = False,
          force: bool = False, scheduler: str | None = None) -> int:
    """Run one member per beta (module docstring) into ``out_dir``; returns the exit status (130 if a
    member was interrupted).

    Every member is checked before the first starts: two betas naming one archive, or a member that
    would be refused (ValueError, RunRefused, ArchiveError), refuse the whole sweep, and ``out_dir`` is
    not created. With ``resume`` finished members are skipped (their rows read from their archives),
    the others resumed (from their ``.part``) or started. The members run in ``workers`` local
    processes, or with ``scheduler`` (an address or a scheduler file) on that Dask cluster's workers;
    SchedulerError if it cannot be reached (before ``out_dir`` is created).
    """
    from .executor import open_pool
    from .streams import say

    members = [member_config(config, b) for b in betas]
    paths = [out_dir / f"{m.name}.h5" for m in members]
    seen: dict[Path, float] = {}
    for b, p in zip(betas, paths):
        if p in seen:
            same = "is given twice" if seen[p] == b else f"and {seen[p]!r} give the same archive name"
            raise ValueError(f"--beta: {b!r} {same} ({p}: archives are named by beta to 6 significant digits); "
                             "give distinct values")
        seen[p] = b
    existing = [p for p in paths if p.exists()]
    if existing and not (resume or force):
        raise FileExistsError(f"{existing[0]} exists; use --force to overwrite or --resume to continue")
    unfinished = [partial_path(p) for p in paths if partial_path(p).exists()]
    if unfinished and not (resume or force):
        raise FileExistsError(f"{unfinished[0]}: an unfinished member of an earlier sweep; use --resume to continue "
                              "it or --force to start it again")
    finished = _check_members(members, paths, resume)
    todo = [(m, p) for m, p, done in zip(members, paths, finished) if not done]
    threads = config.pde.options.threads if config.pde is not None else 1
    if todo and scheduler is None and config.model.d >= 3 and threads > 1:
        # the owner has run SHTns (checks above), and libgomp is not fork-safe: a worker forked after that
        # waits forever in its first OpenMP region of two or more threads (solvers.app.executor)
        raise ValueError(f"pde.threads = {threads}: a sweep's local workers are forked processes, in which "
                         "SHTns can run one OpenMP thread only (more would wait forever: OpenMP is not "
                         "fork-safe); set pde.threads = 1 (the members already run in parallel), or give "
                         "--scheduler to run them on a Dask cluster")
    # connected (or refused) before anything is written
    pool = open_pool(min(workers, len(todo)), scheduler) if todo else None
    with pool or contextlib.nullcontext():
        out_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        for m, p, done in zip(members, paths, finished):
            if done:
                _log(m.model.beta)(f"{p} is finished: skipped")
                rows.append(_row(m.model.beta, p, "finished"))
        if pool is not None:
            say(f"{len(todo)} member(s) on {pool.description}")
            futs = [pool.submit(_member, m, str(p), resume) for m, p in todo]
            for _, row in pool.results(futs):
                rows.append(row)
    rows.sort(key=lambda r: r["beta"])
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2))
    print(table(rows))
    plot_sweep(out_dir, rows, f"{config.name}: S^{config.model.d - 1}, {config.model.flow}")
    print(f"summary: {out_dir / 'summary.json'}; figure: {out_dir / FIGURE}")
    return 130 if any(r["status"] == "interrupted" for r in rows) else 0


def plot_sweep(out_dir: str | Path, rows: list[dict] | None = None, title: str | None = None) -> Path:
    """The sweep's figure, ``out_dir / FIGURE``: against sqrt(beta), the count of atoms (PDE) and clusters
    (particles) of mass >= 0.01, every one of their masses, and the time each run ended (a certified
    terminal state filled, another end open). ``rows``: the summary's (default: its summary.json);
    ``title``: default from the first member's archive."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from .plots_base import LABEL_SIZE, NOTE_SIZE, legend_right, readable_log_axis

    out_dir = Path(out_dir)
    if rows is None:
        rows = json.loads((out_dir / "summary.json").read_text())
    rows = sorted(rows, key=lambda r: r["beta"])
    if title is None:
        title = _title_from(rows)
    fig, (ax, axm, axt) = plt.subplots(3, 1, figsize=(9.0, 9.0), sharex=True)
    sb = np.sqrt([r["beta"] for r in rows])
    solvers = [("PDE", "pde_atoms", "pde_masses", "pde_t", "o", "C0"),
               ("particles", "clusters", "particle_masses", "particles_t", "^", "C1")]
    counts = []
    for name, count, masses, t_end, mk, col in solvers:
        if not any(count in r for r in rows):
            continue
        n = [r.get(count, np.nan) for r in rows]
        counts += [v for v in n if isinstance(v, (int, np.integer))]
        what = "PDE atoms" if name == "PDE" else "particle clusters"
        ax.plot(sb, n, mk + "-", color=col, label=f"{what} (mass >= 0.01)")
        xs = [x for x, r in zip(sb, rows) for _ in r.get(masses, [])]
        ms = [m for r in rows for m in r.get(masses, [])]
        axm.plot(xs, ms, mk, color=col, ls="none", alpha=0.8, label=f"{what}: every mass")
        done = [(x, r[t_end],
                 r.get("pde_certified", False) if name == "PDE" else r.get("particles_stop") == "converged")
                for x, r in zip(sb, rows) if t_end in r]
        for filled, label in ((True, "certified stationary" if name == "PDE" else "converged (stopping rule)"),
                              (False, "other end (t_final, a cap)")):
            pts = [(x, t) for x, t, ok in done if ok == filled]
            if pts:
                axt.plot(*zip(*pts), mk, color=col, mfc=col if filled else "white", ms=8, ls="none",
                         label=f"{name}: {label}")
    ax.set_ylabel("count")
    # counts: integer ticks from 0 (within a unit's range the locator falls back to ticks like 1.9, 2.1)
    ax.set_ylim(0, max(counts, default=1) + 1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axm.set_ylabel("atom / cluster mass")
    axm.set_ylim(0, 1.05)
    axt.set_ylabel("time t of the end")
    if axt.get_lines():
        axt.set_yscale("log")
        lo, hi = axt.get_ylim()
        axt.set_ylim(lo / 1.5, hi * 1.5)
        readable_log_axis(axt)
    axt.set_xlabel("sqrt(beta)")
    for a in (ax, axm, axt):
        a.grid(alpha=0.3)
        if a.get_lines():
            legend_right(a)
    ax.set_title(title, fontsize=LABEL_SIZE)
    if not any(a.get_lines() for a in (ax, axm, axt)):          # no member finished (an interrupted sweep)
        ax.text(0.5, 0.5, "no member finished", transform=ax.transAxes, ha="center", fontsize=NOTE_SIZE)
    fig.tight_layout()
    path = out_dir / FIGURE
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _title_from(rows: list[dict]) -> str:
    """The sweep's title from its first member's archive: its name without the member's suffix, the manifold,
    the flow."""
    from .archive import ArchiveError, load

    for r in rows:
        try:
            run = load(r["archive"])
        except (ArchiveError, OSError, KeyError):
            continue
        name = str(run.attrs.get("name", "")).rsplit("_beta", 1)[0]
        return f"{name}: S^{run.model.d - 1}, {run.model.flow}"
    return "sweep"
