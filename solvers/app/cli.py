"""The ``attnpde`` command line.

    attnpde run CONFIG [--out PATH] [--resume] [--force] [--quiet]
    attnpde info ARCHIVE [--layout]
    attnpde plot ARCHIVE [--out DIR]
    attnpde sweep CONFIG --beta LIST [--workers N | --scheduler ADDRESS] [--out DIR] [--resume] [--force]
    attnpde validate CONFIG --n LIST [--seeds M] [--workers N | --scheduler ADDRESS] [--at T] [--out PATH] [--force]
    attnpde branch CONFIG [--out PATH] [--resume] [--force]
    attnpde extremum CONFIG [--out PATH]

``--scheduler`` sends the tasks of a sweep or a validation to a running Dask cluster
(:mod:`solvers.app.executor`); without it they run in ``--workers`` local processes (default 2).

Exit status: 0 done, 1 the run failed after its archive was created (status "failed", attr ``failure``),
2 bad input (configuration, arguments, archive), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (``kill``,
a batch system's time limit: handled as Ctrl-C is), 141 the output's reader closed it early (``| head``: no
traceback). A run stops after its current step at the first Ctrl-C or SIGTERM and keeps its state there
(``--resume`` continues from it); a second Ctrl-C, or a Ctrl-C after a SIGTERM, stops it at once
(``solvers.interrupts``). Only the first SIGTERM counts (:func:`_interrupt`).
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from .streams import say, silence, standard_streams

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE      # what a shell reports for a tool killed by SIGPIPE


def _err(msg: str) -> int:
    say(f"attnpde: error: {msg}")
    return EXIT_BAD_INPUT


#: the arguments of the command being run (``main``'s ``argv``, or the process's own)
_ARGV: list[str] = []


def _command(subcommand: str) -> str:
    """The command line as typed (recorded in the archive; ``archive.made_by`` reads its subcommand): the
    arguments given to ``main``, which are the process's own only when ``main`` is called without any."""
    return "attnpde " + " ".join(shlex.quote(a) for a in _ARGV) if _ARGV else f"attnpde {subcommand}"


def _config_and_list(path: str, text: str, flag: str):
    """(configuration, values of the comma-separated list ``text`` given to ``flag``, None), or
    (None, None, exit status) after printing the error."""
    from .config import ConfigError, load_config
    from .sweep import parse_list
    try:
        return load_config(path), parse_list(text, flag, "100,1000,10000" if flag == "--n" else "1,5,25"), None
    except ConfigError as e:
        return None, None, _config_error(path, e)
    except ValueError as e:
        return None, None, _err(str(e))


def _default_out(config_path: str) -> Path:
    return Path(config_path).with_suffix(".h5")


def _config_error(path: str, e: Exception) -> int:
    """The error of a configuration file, naming the file once."""
    msg = str(e)
    return _err(msg if msg.startswith(f"{path}:") else f"{path}: {msg}")


def _unwritable(out: Path, what: str, *, directory: bool = False) -> str | None:
    """Why no file (``directory``: no directory) can be created at ``out`` (None if one can), found before
    anything is written: the nearest existing ancestor must be a directory in which a file can be
    created (probed with a temporary file, which also catches read-only and pseudo file systems such as
    /proc, even as root)."""
    import tempfile

    anc = out if directory else out.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        return f"{what} {out}: cannot be created: {anc} is not a directory"
    try:
        with tempfile.TemporaryFile(dir=anc):
            pass
    except OSError as e:
        return f"{what} {out}: cannot be created: no file can be written in {anc} ({e.strerror or e})"
    return None


def _archive_path_problem(out: Path, config_path: str, given: bool, resume: bool = False) -> str | None:
    """Why ``out`` cannot receive the archive of the configuration at ``config_path`` (None if it can).
    Checked before the run: --force must never replace the configuration or meet a directory. A resume
    creates nothing: whether the archive can be written, its lock says (a read-only archive, in one line)."""
    what = "--out" if given else "the archive path (default)"
    if out.is_dir():
        return f"{what} {out}: is a directory; give a file path (e.g. {out / (Path(config_path).stem + '.h5')})"
    try:
        same = out.exists() and out.samefile(config_path)
    except OSError:
        same = False
    if same:
        other = _default_out(config_path)
        other = other if other != out else out.with_name(out.stem + "_run.h5")
        return f"{what} {out}: is the configuration itself; give the archive another path (e.g. {other})"
    return None if resume else _unwritable(out, what)


def _config_and_archive(args, load, config_error, resume_checks: bool):
    """The configuration at ``args.config`` (read by ``load``) and the archive path, or the exit status of a
    refusal: a configuration error, --resume with --force, an archive path that cannot receive it.
    ``resume_checks``: a resume of an existing archive leaves its writability to the archive's lock."""
    try:
        config = load(args.config)
    except config_error as e:
        return _config_error(args.config, e)
    out = Path(args.out) if args.out else _default_out(args.config)
    if args.resume and args.force:
        return _err("--resume and --force exclude each other")
    problem = _archive_path_problem(out, args.config, bool(args.out),
                                    resume=resume_checks and args.resume and out.exists())
    if problem:
        return _err(problem)
    return config, out


def _report(command: str, args, out: Path, outcome) -> int:
    """The end of ``attnpde run`` / ``branch``: the archive and its status, then how to continue an
    interrupted one, else its summary."""
    print(f"archive: {outcome.path} ({outcome.status})")
    if outcome.status == "interrupted":
        print(f"interrupted: continue with  attnpde {command} {shlex.quote(args.config)} --out "
              f"{shlex.quote(str(out))} --resume")
        return _interrupted_exit()
    from .info import describe
    print(describe(outcome.path))
    return EXIT_OK


def cmd_run(args) -> int:
    from .archive import ArchiveError, ArchiveFull
    from .config import ConfigError, load_config
    from .runner import RunFailed, RunRefused, run_config

    got = _config_and_archive(args, load_config, ConfigError, resume_checks=True)
    if isinstance(got, int):
        return got
    config, out = got
    command = _command("run")
    try:
        outcome = run_config(config, out, resume=args.resume, force=args.force, command=command,
                             progress=None if not args.quiet else False)
    except (RunRefused, ArchiveError) as e:
        return _err(str(e))
    except (RunFailed, ArchiveFull) as e:
        # a stage's failure, or no room for the archive: the archive keeps what it held (status failed)
        say(f"attnpde: error: {e.strerror if isinstance(e, ArchiveFull) else e}")
        return EXIT_FAILED
    except OSError as e:
        # creating the archive (the checks above cannot foresee every file system); a stage's own
        # errors come as RunFailed
        return _err(f"{out}: cannot create the archive ({e.strerror or e})")
    return _report("run", args, out, outcome)


def _not_a_regular_file(path: str) -> str | None:
    """Why ``path`` cannot be an archive to read (a FIFO would block its reader, a device such as /dev/zero
    never ends), None for a regular file, a directory or a missing path (the reader says what they are)."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"{path}: is {what}; give an archive (.h5)"


def cmd_info(args) -> int:
    from .archive import ArchiveError
    from .info import describe, describe_layout

    problem = _not_a_regular_file(args.archive)
    if problem:
        return _err(problem)
    try:
        text = describe_layout(args.archive) if args.layout else describe(args.archive)
    except ArchiveError as e:
        return _err(str(e))
    except Exception as e:                      # content the checks let through, read wrong
        return _err(f"{args.archive}: damaged archive: cannot describe it ({type(e).__name__}: "
                    f"{' '.join(str(e).split())})")
    print(text)
    return EXIT_OK


def cmd_plot(args) -> int:
    from .archive import ArchiveError

    problem = _not_a_regular_file(args.archive)
    if problem:
        return _err(problem)

    if args.out:
        out = Path(args.out)
        problem = (f"--out {out}: is a file; give the directory of the figures" if out.exists() and not out.is_dir()
                   else _unwritable(out, "--out", directory=True))
        if problem:
            return _err(problem)
    try:
        from .plots import plot_archive
        files = plot_archive(args.archive, args.out)
    except ArchiveError as e:
        return _err(str(e))
    except OSError as e:
        # writing the figures (the check above cannot foresee every file system)
        return _err(f"cannot write the figures ({e.strerror or e})")
    except Exception as e:                      # content the checks let through, drawn wrong
        return _err(f"{args.archive}: damaged archive: cannot plot it ({type(e).__name__}: "
                    f"{' '.join(str(e).split())})")
    for f in files:
        print(f)
    return EXIT_OK


def _workers(args) -> tuple[int, str | None]:
    """(local worker processes, None) or (0, the error) for --workers and --scheduler."""
    if args.scheduler is not None:
        if args.workers is not None:
            return 0, ("--workers sets the local processes; with --scheduler the cluster's workers run the "
                       "tasks (start as many as wanted with `dask worker`): give one of the two")
        if not args.scheduler.strip():
            return 0, "--scheduler: give the scheduler's address (tcp://HOST:PORT) or its scheduler file"
        return 1, None
    workers = 2 if args.workers is None else args.workers
    if workers < 1:
        return 0, "--workers must be >= 1"
    from .._memory import refuse_if_too_big
    try:
        refuse_if_too_big({f"{workers} worker processes": workers * WORKER_BYTES},
                          f"lower --workers (each process takes about {WORKER_BYTES / 2 ** 20:.0f} MiB before its "
                          "runs)")
    except ValueError as e:
        return 0, f"--workers {workers}: {str(e).replace('the run would need', 'would need')}"
    return workers, None


#: memory of a local worker process before its runs (Python, numpy, scipy and the solvers imported), rounded up
WORKER_BYTES = 100.0 * 2 ** 20


def cmd_sweep(args) -> int:
    from .archive import ArchiveError
    from .config import ConfigError
    from .executor import SchedulerError, TaskLost
    from .runner import RunFailed, RunRefused
    from .sweep import sweep

    config, betas, rc = _config_and_list(args.config, args.beta, "--beta")
    if rc is not None:
        return rc
    workers, problem = _workers(args)
    if problem:
        return _err(problem)
    if args.resume and args.force:
        return _err("--resume and --force exclude each other")
    out_dir = Path(args.out) if args.out else Path(args.config).with_suffix("")
    what = "--out" if args.out else "the archive directory (default: the configuration's path without .toml)"
    if out_dir.exists() and not out_dir.is_dir():
        return _err(f"{what} {out_dir}: exists and is not a directory; give a directory for the archives")
    problem = _unwritable(out_dir, what, directory=True)
    if problem:
        return _err(problem)
    try:
        rc = sweep(config, betas, out_dir, workers=workers, resume=args.resume, force=args.force,
                   scheduler=args.scheduler)
    except ConfigError as e:
        return _config_error(args.config, e)
    except (RunRefused, ArchiveError, ValueError, FileExistsError, SchedulerError) as e:
        return _err(str(e))
    except TaskLost as e:
        say(f"attnpde: error: {e}; the members that finished are complete, continue with --resume")
        return EXIT_FAILED
    except RunFailed as e:
        say(f"attnpde: error: {e}")
        return EXIT_FAILED
    except OSError as e:
        return _err(f"{out_dir}: {e.strerror or e}")
    return rc


def cmd_validate(args) -> int:
    from .archive import ArchiveError
    from .executor import SchedulerError, TaskLost
    from .runner import RunRefused
    from .plots import plot_validation
    from .validate import validate

    config, ns, rc = _config_and_list(args.config, args.n, "--n")
    if rc is not None:
        return rc
    if any(v != int(v) or v < 1 for v in ns):
        return _err("--n: particle counts must be integers >= 1")
    if args.seeds < 1:
        return _err("--seeds must be >= 1")
    workers, problem = _workers(args)
    if problem:
        return _err(problem)
    if config.pde is None or config.particles is None:
        return _err(f"{args.config}: validate needs both a [pde] and a [particles] table")
    if config.particles.stop is not None:
        return _err(f"{args.config}: particles.stop: validate compares every N at the same times; "
                    "remove the stopping rule")
    out = Path(args.out) if args.out else Path(args.config).with_name(Path(args.config).stem + "_validation.h5")
    problem = _archive_path_problem(out, args.config, bool(args.out))
    if problem:
        return _err(problem)
    command = _command("validate")
    try:
        res = validate(config, [int(v) for v in ns], args.seeds, out, workers=workers, force=args.force,
                       at=args.at, command=command, scheduler=args.scheduler)
    except (RunRefused, ArchiveError, ValueError, SchedulerError) as e:
        return _err(str(e))
    except TaskLost as e:
        say(f"attnpde: error: {e}")
        return EXIT_FAILED
    print(res.table)
    png = plot_validation(res, out.with_suffix(".png"),
                          f"{config.name}: S^{config.model.d - 1}, beta = {config.model.beta:g}, {config.model.flow}")
    print(f"archive: {out}; figure: {png}")
    return EXIT_OK


def cmd_branch(args) -> int:
    """A branch of stationary states with noise into an archive, and its diagram (``solvers.app.branch``)."""
    from .archive import ArchiveError
    from .branch import load_branch_config, run_branch
    from .config import ConfigError
    from .runner import RunRefused

    got = _config_and_archive(args, load_branch_config, ConfigError, resume_checks=False)
    if isinstance(got, int):
        return got
    config, out = got
    try:
        outcome = run_branch(config, out, resume=args.resume, force=args.force, command=_command("branch"))
    except (RunRefused, ArchiveError) as e:
        return _err(str(e))
    except OSError as e:
        return _err(f"{out}: cannot write the archive ({e.strerror or e})")
    status = _report("branch", args, out, outcome)
    if status == EXIT_OK and outcome.figure is not None:
        print(f"figure: {outcome.figure}")
    return status


_SCHEDULER_HELP = ("a running Dask scheduler (tcp://HOST:PORT, or the file of `dask scheduler --scheduler-file`): "
                   "the tasks run on its workers instead of local processes (docs/cluster.md)")


class _Version(argparse.Action):
    """--version: the package's version (that of its archives' ``software_version``)."""

    def __init__(self, option_strings, dest, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from .. import __version__
        print(f"attnpde {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="attnpde", description="Mean-field attention PDE and particle runs")
    ap.add_argument("--version", action=_Version, help="print attnpde's version and exit")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a configuration into an HDF5 archive")
    r.add_argument("config", help="TOML configuration")
    r.add_argument("--out", help="archive path (default: the configuration's path with .h5; missing "
                   "directories are created)")
    r.add_argument("--resume", action="store_true", help="continue a killed or interrupted run")
    r.add_argument("--force", action="store_true", help="overwrite an existing archive")
    r.add_argument("--quiet", action="store_true", help="no progress bar (plain periodic lines)")
    r.set_defaults(func=cmd_run)
    i = sub.add_parser("info", help="what a run was, how it ended, its key numbers")
    i.add_argument("archive", help="an archive of `attnpde run`, `sweep` (a member) or `validate` (.h5, or "
                                   ".h5.part while unfinished)")
    i.add_argument("--layout", action="store_true",
                   help="the archive's layout instead: every group, dataset (shape, type, dimensions, what it "
                        "holds) and attribute")
    i.set_defaults(func=cmd_info)
    p = sub.add_parser("plot", help="PNG figures of a run")
    p.add_argument("archive", help="an archive of `attnpde run`, `sweep` (a member) or `validate`")
    p.add_argument("--out", help="directory for the PNGs (default: next to the archive)")
    p.set_defaults(func=cmd_plot)
    s = sub.add_parser("sweep", help="one run per beta, in parallel; table and cluster count vs sqrt(beta)")
    s.add_argument("config", help="TOML configuration (its [model] beta is replaced by each --beta value)")
    s.add_argument("--beta", required=True, help="comma-separated values, e.g. 1,5,25")
    s.add_argument("--workers", type=int, help="local processes (default 2)")
    s.add_argument("--scheduler", metavar="ADDRESS", help=_SCHEDULER_HELP)
    s.add_argument("--out", help="directory of the archives (default: the configuration's path without .toml)")
    s.add_argument("--resume", action="store_true",
                   help="skip the complete members, continue each unfinished one (.part) from its restart state")
    s.add_argument("--force", action="store_true", help="run every member again, overwriting its archive")
    s.set_defaults(func=cmd_sweep)
    v = sub.add_parser("validate", help="particles -> PDE: distances against N (log-log, fitted slope)")
    v.add_argument("config", help="TOML configuration with [pde] and [particles] (its n is replaced)")
    v.add_argument("--n", required=True, help="comma-separated particle counts, e.g. 100,1000,10000")
    v.add_argument("--seeds", type=int, default=1, help="seeds per N (particles.seed, +1, ...)")
    v.add_argument("--workers", type=int, help="local processes (default 2; 1: in this process)")
    v.add_argument("--scheduler", metavar="ADDRESS", help=_SCHEDULER_HELP)
    v.add_argument("--at", type=float, help="time of the fit (default: the last common snapshot)")
    v.add_argument("--out", help="archive path (default: CONFIG's stem + _validation.h5)")
    v.add_argument("--force", action="store_true", help="overwrite an existing archive")
    v.set_defaults(func=cmd_validate)
    b = sub.add_parser("branch", help="a branch of stationary states with noise (continuation in nu); its diagram")
    b.add_argument("config", help="TOML configuration with [model] and [branch] (docs/noise.md)")
    b.add_argument("--out", help="archive path (default: the configuration's path with .h5); the diagram is "
                   "written beside it as <stem>_branch.png")
    b.add_argument("--resume", action="store_true", help="continue an interrupted or killed branch from its last point")
    b.add_argument("--force", action="store_true", help="overwrite an existing archive")
    b.set_defaults(func=cmd_branch)
    e = sub.add_parser("extremum", help="the global extremum of the energy, certified (docs/landscape.md); its figure")
    e.add_argument("config", help="TOML configuration (its [model] is read)")
    e.add_argument("--out", help="archive path (default: the configuration's path with .h5): a run archive of the "
                   "same model gains the group /extremum (and the comparison with its certified end), another path "
                   "gets a file of its own; the figure is written beside it as <stem>_extremum.png")
    e.set_defaults(func=cmd_extremum)
    return ap


#: options whose value is a comma-separated list of numbers
_LIST_OPTIONS = ("--beta", "--n")


def _attach_list_values(argv: list[str]) -> list[str]:
    """``--beta -1,5`` as ``--beta=-1,5``: argparse reads a word that starts with '-' and is not a plain
    number as an option ("expected one argument"); attached, the list's own check says what is wrong."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] in _LIST_OPTIONS and word[:1] == "-" and word[1:2] in "0123456789.":
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def cmd_extremum(args) -> int:
    from .archive import ArchiveError
    from .config import ConfigError
    from .extremum_cmd import run_extremum

    out = Path(args.out) if args.out else _default_out(args.config)
    problem = _archive_path_problem(out, args.config, args.out is not None)
    if problem:
        return _err(problem)
    try:
        ext, end, path, fig = run_extremum(args.config, out, command=_command("extremum"))
    except ConfigError as e:
        return _config_error(args.config, e)
    except (ArchiveError, ValueError) as e:
        return _err(str(e))
    print(ext.summary())
    if end is not None:
        print(end.summary())
    print(f"archive: {path} (group /extremum)")
    if fig is not None:
        print(fig)
    return EXIT_OK


#: the interrupting signals received (SIGINT, SIGTERM), in order
_SIGNALS: list[int] = []


def _interrupt(signum, frame) -> None:
    """Python's own Ctrl-C handler (raise KeyboardInterrupt), remembering which signal came: SIGTERM
    is taken for a Ctrl-C (a run stops cleanly, its archive resumable) and exits with 143.

    Only the first SIGTERM counts. GNU ``timeout`` (and a batch system's time limit) sends it to the command
    and then to its whole process group, so the command gets it twice for one stop; taken for a second
    Ctrl-C, the second would raise inside the pool's shutdown after the first (``attnpde sweep``,
    ``validate``) and leave the owner waiting at exit for workers never told to end. A Ctrl-C after a
    SIGTERM still raises, as a second Ctrl-C does (the workers take signals by the same rule:
    ``solvers.app.executor``)."""
    if signum == signal.SIGTERM and signal.SIGTERM in _SIGNALS:
        return
    _SIGNALS.append(signum)
    raise KeyboardInterrupt


def _interrupted_exit() -> int:
    """128 + the first interrupting signal (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + _SIGNALS[0] if _SIGNALS else EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    # everything the command does, its imports of the numerics included, is inside _main's try: a Ctrl-C at
    # any moment ends it with 130 and one line (``solvers`` imports its public names on first use, so the
    # interpreter reaches this line before any heavy import). A Ctrl-C inside a compiled module's
    # initialisation surfaces as that import's ImportError ("initialization failed"): the handler records
    # the signal so that it is told apart from a real import error. SIGTERM is handled as Ctrl-C is.
    #
    # A Ctrl-C can also be swallowed: raised inside the initialisation of a compiled module whose import a
    # library wraps in ``try: ... except ImportError`` (an optional dependency), it never reaches _main, and
    # the command would go on to run to its end and exit 0. The handler has recorded it all the same: a run started
    # after it stops after its first step
    # (``set_stop_pending``), as after a Ctrl-C in that step, and the command exits as interrupted.
    try:
        from ..interrupts import set_stop_pending
    except KeyboardInterrupt:                  # before the handlers below: Python's own raised it
        say("attnpde: interrupted")
        return EXIT_INTERRUPTED

    _SIGNALS.clear()
    saved = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) == default:
            saved[sig] = signal.signal(sig, _interrupt)
    pending = set_stop_pending(lambda: _SIGNALS[0] if _SIGNALS else None)
    try:
        return _main(argv)
    finally:
        set_stop_pending(pending)
        for sig, previous in saved.items():        # as they were for a caller in the same process
            signal.signal(sig, previous)


def _main(argv: list[str] | None) -> int:
    standard_streams()
    try:
        _ARGV[:] = sys.argv[1:] if argv is None else list(argv)
        args = build_parser().parse_args(_attach_list_values(_ARGV))
        if args.command in _RUNNING and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            _warn_sigint_ignored()
        return args.func(args)
    except (KeyboardInterrupt, ImportError) as e:
        if isinstance(e, ImportError) and not _SIGNALS:
            return _internal_error(e)
        say("attnpde: interrupted" + (" (SIGTERM)" if _SIGNALS[:1] == [signal.SIGTERM] else ""))
        return _interrupted_exit()
    except BrokenPipeError:
        # the reader of our output went away (``attnpde info A | head``): stop quietly, as a shell tool does;
        # stdout is silenced so that the interpreter's flush at exit does not fail a second time
        silence(sys.stdout)
        return EXIT_BROKEN_PIPE
    except OSError as e:
        if e.filename is not None:          # a file of the command's, not its output
            say(f"attnpde: error: {e.filename}: {e.strerror or e}")
            return EXIT_FAILED
        # the output cannot be written (``attnpde info A > /dev/full``): say so, as a shell tool does
        silence(sys.stdout)
        say(f"attnpde: error: cannot write the output: {e}")
        return EXIT_FAILED
    except Exception as e:                  # a bug: one line all the same (no traceback)
        return _internal_error(e)


#: the commands that run for a while, which a Ctrl-C should be able to stop
_RUNNING = ("run", "sweep", "validate", "branch")


def _warn_sigint_ignored() -> None:
    """Started with SIGINT ignored (a non-interactive shell's ``&`` does that, and the process inherits it):
    a Ctrl-C cannot reach the command. Said once, with what does stop it cleanly."""
    import os
    say(f"attnpde: note: started with Ctrl-C (SIGINT) ignored, as a shell's `&` starts a command: Ctrl-C will not "
        f"stop it. `kill {os.getpid()}` (SIGTERM) stops it cleanly, as a Ctrl-C would (--resume continues it)")


def _internal_error(e: BaseException) -> int:
    """An error no check foresaw (a bug): one line, exit 1; the traceback with ATTNPDE_TRACEBACK=1."""
    import os
    import traceback

    if os.environ.get("ATTNPDE_TRACEBACK"):
        traceback.print_exc()
    say(f"attnpde: error: unexpected {type(e).__name__}: {' '.join(str(e).split())} (a bug: please report it with "
        "the command; ATTNPDE_TRACEBACK=1 shows where)")
    return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
