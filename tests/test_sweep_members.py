"""Sweep members are complete or absent: a member killed in the middle (kill -9 of its process) leaves only
its ``.part``, which the sweep refuses to overwrite silently, and which ``--resume`` continues to the same
numbers as the uninterrupted sweep (or starts again when it is damaged). The local pool and the Dask one
share this code (solvers.app.executor); tests/test_dask_cluster.py runs it on a real cluster."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from solvers.app.archive import load
from solvers.app.executor import FORWARDED_SIGNAL

ROOT = Path(__file__).resolve().parents[1]

CFG = """
[run]
name = "m"
[model]
d = 2
beta = 1.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 64
t_final = 0.6
save_every = 0.05
max_degree = 256
tail_max = 1e-2
"""

def _cli(*args, cwd: Path, kill_after: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # kill_after: the member's process kills itself (SIGKILL) once its archive holds that many snapshots
    # (tests/signal_after_rows.py): a lost worker
    pre = [] if kill_after is None else [str(ROOT / "tests" / "signal_after_rows.py"), str(kill_after),
                                         str(int(signal.SIGKILL))]
    cmd = [sys.executable, *pre, *(["-m", "solvers.app.cli"] if kill_after is None else []), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    (d / "m.toml").write_text(CFG)
    r = _cli("sweep", d / "m.toml", "--beta", "1,2", "--workers", "1", "--out", d / "out", cwd=d)
    assert r.returncode == 0, r.stderr
    return d / "out"


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_killed_member_is_absent_and_resume_continues_it(tmp_path, uninterrupted):
    cfg = tmp_path / "m.toml"
    cfg.write_text(CFG)
    out = tmp_path / "out"
    r = _cli("sweep", cfg, "--beta", "1,2", "--workers", "1", "--out", out, cwd=tmp_path, kill_after=4)
    assert r.returncode == 1 and "lost with the process" in r.stderr and "--resume" in r.stderr, r.stderr
    # the killed member (beta = 1 runs first on the one worker) has no archive, only its temporary file
    assert not list(out.glob("*.h5")) and [p.name for p in out.glob("*.part")] == ["m_beta1.h5.part"]
    with h5py.File(out / "m_beta1.h5.part") as f:
        assert f.attrs["status"] == "running" and 4 <= f["pde/t"].shape[0] < 13

    again = _cli("sweep", cfg, "--beta", "1,2", "--out", out, cwd=tmp_path)
    assert again.returncode == 2 and "m_beta1.h5.part: an unfinished member" in again.stderr

    done = _cli("sweep", cfg, "--beta", "1,2", "--out", out, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".h5", ".part")) == ["m_beta1.h5", "m_beta2.h5"]
    for name in ("m_beta1.h5", "m_beta2.h5"):
        a, ref = load(out / name), load(uninterrupted / name)
        assert a.status == "finished" and np.array_equal(a.pde.t, ref.pde.t)
        assert np.abs(a.pde.coeffs - ref.pde.coeffs).max() <= 1e-12
    with h5py.File(out / "m_beta1.h5") as f:
        assert f.attrs["resumed"], "the member was started again, not continued"


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_damaged_part_is_started_again(tmp_path, uninterrupted):
    cfg = tmp_path / "m.toml"
    cfg.write_text(CFG)
    out = tmp_path / "out"
    out.mkdir()
    # a member's temporary file cut in the middle of a write (not even HDF5 any more)
    (out / "m_beta2.h5.part").write_bytes((uninterrupted / "m_beta2.h5").read_bytes()[:3000])
    r = _cli("sweep", cfg, "--beta", "2", "--out", out, "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cannot be continued" in r.stderr and not (out / "m_beta2.h5.part").exists()
    a, ref = load(out / "m_beta2.h5"), load(uninterrupted / "m_beta2.h5")
    assert np.array_equal(a.pde.coeffs, ref.pde.coeffs) and np.array_equal(a.pde.t, ref.pde.t)


def test_finished_part_is_kept_not_recomputed(tmp_path, uninterrupted):
    """A member whose archive finished but which was stopped before its rename (a Ctrl-C while the archive
    closed) is complete: --resume keeps it, byte for byte, under its final name, and runs nothing."""
    cfg = tmp_path / "m.toml"
    cfg.write_text(CFG)
    out = tmp_path / "out"
    out.mkdir()
    done = (uninterrupted / "m_beta2.h5").read_bytes()
    (out / "m_beta2.h5.part").write_bytes(done)
    r = _cli("sweep", cfg, "--beta", "2", "--out", out, "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "kept as m_beta2.h5" in r.stderr and "[pde] S^1" not in r.stderr, r.stderr
    assert (out / "m_beta2.h5").read_bytes() == done and not (out / "m_beta2.h5.part").exists()


@pytest.mark.slow
def test_resume_may_change_how_often_the_archives_are_written(tmp_path, uninterrupted):
    """[run] checkpoint_interval and flush_interval change no number: a sweep --resume with other values
    keeps the finished members (also one finished before its rename) and refuses any other change."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "m_beta1.h5").write_bytes((uninterrupted / "m_beta1.h5").read_bytes())
    done = (uninterrupted / "m_beta2.h5").read_bytes()
    (out / "m_beta2.h5.part").write_bytes(done)
    cfg = tmp_path / "m.toml"
    cfg.write_text(CFG.replace('name = "m"', 'name = "m"\ncheckpoint_interval = 5.0\nflush_interval = 0.5'))
    r = _cli("sweep", cfg, "--beta", "1,2", "--out", out, "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "kept as m_beta2.h5" in r.stderr and "[pde] S^1" not in r.stderr, r.stderr
    assert (out / "m_beta2.h5").read_bytes() == done
    cfg.write_text(CFG.replace("tail_max = 1e-2", "tail_max = 2e-2"))
    r = _cli("sweep", cfg, "--beta", "1,2", "--out", out, "--resume", cwd=tmp_path)
    assert r.returncode == 2 and "another configuration" in r.stderr, r.stderr


# Members still in their spectral steps seconds after they start, on any machine: the noise keeps the run
# Eulerian (no handoff to the quick node steps, no error-estimate rerun before t_final) and dt_max bounds
# it below by 1e6 steps (some 40 us each). With t_final alone a fast machine (AMD EPYC family 26) ended
# the main run within the 1 s wait below, and the interrupt met the error-estimate rerun instead of a step.
LONG = (CFG.replace("t_final = 0.6", "t_final = 200.0").replace("save_every = 0.05", "save_every = 1.0")
        .replace('flow = "ascent"', 'flow = "ascent"\nnoise = 0.05').replace("[pde]", "[pde]\ndt_max = 2e-4"))


def _start_long_sweep(tmp_path: Path):
    """A sweep of four long members on two workers, in a process group of its own, once its first
    two members are inside their runs: (process, the two members' .part files, output folder, the file
    of its stderr). Inside: each has logged its first step (its progress line, written from the stepping
    loop, where an interrupt stops the run after its step); before, an interrupt can meet a member setting
    up its archive. (A sleep of 1 s after the .part files appeared stood for this event.)"""
    import re
    import time

    cfg = tmp_path / "m.toml"
    cfg.write_text(LONG)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "solvers.app.cli", "sweep", str(cfg), "--beta", "1,2,3,4", "--workers", "2",
           "--out", str(out)]
    err = tmp_path / "sweep.stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=stderr,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = [out / f"m_beta{b}.h5.part" for b in (1, 2)]
    stepping = [re.compile(rf"\[beta={b}\] \[pde\] t=") for b in (1, 2)]
    deadline = time.monotonic() + 120               # a hang guard: the members step within seconds
    while not all(r.search(err.read_text()) for r in stepping) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and all(r.search(err.read_text()) for r in stepping), err.read_text()
    assert all(p.exists() for p in started), err.read_text()
    return proc, started, out, err


def _stopped_after_a_step(part: Path) -> bool:
    """Whether the member's run stopped after a step and kept that step's state (status "interrupted",
    the message of a stop after the step, its restart state at or after its last snapshot), rather than
    being killed or stopped at once (a second interrupt)."""
    run = load(part)
    return (run.status == "interrupted" and run.pde.stop_reason == "interrupted"
            and "its state is kept" in run.pde.message and run.pde.restart["t"] >= run.pde.t[-1])


@pytest.mark.slow
@pytest.mark.parametrize("who, sig", [("group", signal.SIGINT), ("parent", signal.SIGINT),
                                      ("group", signal.SIGTERM), ("parent, then group", signal.SIGTERM)])
def test_interrupted_sweep_stops_its_members_and_starts_no_other(tmp_path, who, sig):
    """Ctrl-C on a sweep of four long members on two workers, at a terminal (SIGINT to the whole process
    group) or to the sweep's process alone, or SIGTERM to the group (a batch system's time limit), or to
    the sweep's process and then at once to its group (what GNU timeout does): the two running members stop
    after their step with resumable archives marked "interrupted", the two queued ones never start (no
    archive, no .part), and the sweep exits 130 (143) at once. Before, a queued member was run to its end
    first, an idle worker interrupted in the executor's loop could leave the sweep waiting for it forever,
    SIGTERM killed the workers (their runs lost what they had done since their last snapshot), and
    timeout's two SIGTERMs left the sweep waiting at exit for its idle workers (the second, taken for a
    second Ctrl-C, broke off the pool's shutdown)."""
    import time

    proc, started, out, errfile = _start_long_sweep(tmp_path)
    t0 = time.monotonic()
    if who == "group":
        os.killpg(proc.pid, sig)
    elif who == "parent":
        os.kill(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
        time.sleep(0.002)       # timeout's two kill() calls, far enough apart to be taken as two signals
        os.killpg(proc.pid, sig)
    try:
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = errfile.read_text()
    assert proc.returncode == 128 + sig, err
    assert time.monotonic() - t0 < 30, err
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in started], err
    for p in started:
        assert _stopped_after_a_step(p), (p, err)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _asleep(pid: int) -> bool:
    """Whether the process is sleeping (Linux /proc; without it, taken as asleep)."""
    if not Path("/proc/self/stat").exists():
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_workers_of_a_killed_sweep_stop_and_end(tmp_path):
    """kill -9 of the sweep's process alone: its workers, left without an owner, stop their runs after
    their step (archives resumable, marked "interrupted") and end, instead of waiting for work forever."""
    import time

    proc, started, out, _ = _start_long_sweep(tmp_path)
    workers = _children(proc.pid)
    assert len(workers) >= 2, workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left, "workers left running"
    for p in started:
        assert _stopped_after_a_step(p), p


@pytest.mark.slow
def test_a_lost_worker_ends_the_sweep_and_the_other_keeps_its_state(tmp_path):
    """One worker of two killed (kill -9 of its member's process, once the member has 4 snapshots): the pool
    is broken and sends SIGTERM to its other worker, whose run stops after its step with its state kept
    (unless it reached its own 4 snapshots first and was killed too), and the sweep ends. Before, that
    SIGTERM killed it, with the work since its last snapshot. (A hang is _cli's timeout; a member run to its
    end leaves no .part.)"""
    cfg = tmp_path / "m.toml"
    cfg.write_text(LONG)
    out = tmp_path / "out"
    r = _cli("sweep", cfg, "--beta", "1,2", "--workers", "2", "--out", out, cwd=tmp_path, kill_after=4)
    assert r.returncode == 1 and "lost with the process" in r.stderr, r.stderr
    parts = sorted(out.iterdir())
    assert [p.name for p in parts] == ["m_beta1.h5.part", "m_beta2.h5.part"]
    killed = []
    for p in parts:
        with h5py.File(p) as f:
            killed.append(f.attrs["status"] == "running" and f["pde/t"].shape[0] >= 4)
        assert killed[-1] or _stopped_after_a_step(p), (p, r.stderr)
    assert any(killed)


def _stop_after_sigterm(path: str) -> str:
    import time

    from solvers.interrupts import graceful_stop
    with graceful_stop() as request:          # a run: stops at its next step once asked
        Path(path + ".running").touch()      # in the run: the test may now break the pool
        while not request:
            time.sleep(0.02)
    Path(path).write_text(request.why)       # its state kept
    return request.why


def _pid() -> int:
    return os.getpid()


def test_a_lost_idle_worker_does_not_leave_the_pool_waiting(tmp_path, monkeypatch):
    """The pool breaks when an idle worker is killed (kill -9 while it waits for work: the task queue's lock
    stays held). The other worker's run, sent SIGTERM by the executor, stops after its step and keeps its
    state; it can then never get its shutdown sentinel (nor on Python >= 3.12 in any broken pool), and
    close() kills it as soon as it is done (interrupted and in no task), not after BROKEN_GRACE and not
    never. With the grace alone, close() took the whole grace."""
    import time

    from solvers.app import executor
    monkeypatch.setattr(executor, "BROKEN_GRACE", 60.0)
    mark = tmp_path / "stopped"
    pool = executor.LocalPool(2)
    try:
        running = pool.submit(_stop_after_sigterm, str(mark))
        idle = pool.submit(_pid).result(timeout=60)   # the other worker, idle once it returns
        # events, not a sleep: the task is in its run (a SIGTERM before it stops the task without a run,
        # and nothing is kept), and the other worker waits for work (asleep reading the task queue, whose
        # lock it holds)
        deadline = time.monotonic() + 60
        while not (Path(f"{mark}.running").exists() and _asleep(idle)):
            assert time.monotonic() < deadline, "the task's run did not start, or the other worker did not wait"
            time.sleep(0.01)
        os.kill(idle, signal.SIGKILL)
        with pytest.raises(executor.TaskLost):
            list(pool.results([running]))
    finally:
        t0 = time.monotonic()
        pool.close()
        took = time.monotonic() - t0
    assert took < 10, took
    assert mark.read_text() == "interrupted by SIGTERM"


# --- Ctrl-C in a local worker (solvers.app.executor), task by task --------------------------------------
def _ctrl_c_during_a_write():
    import time

    from solvers.app.runner import deferred_interrupt
    try:
        with deferred_interrupt():
            os.kill(os.getpid(), signal.SIGINT)          # the terminal's Ctrl-C lands in an archive write
            time.sleep(0.2)
            done = "the write finished"
    except KeyboardInterrupt:
        return done + ", then the run was interrupted"
    return "not interrupted"


def _forwarded_after_ctrl_c():
    import time
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    os.kill(os.getpid(), FORWARDED_SIGNAL)               # what the interrupted owner sends its workers
    time.sleep(0.2)
    return "its interrupted state written, not interrupted twice"


def _forwarded_alone():
    import time
    try:
        os.kill(os.getpid(), FORWARDED_SIGNAL)           # only the owner was interrupted
        time.sleep(0.5)
    except KeyboardInterrupt:
        return "interrupted"
    return "not interrupted"


def _sigterm():
    import time
    try:
        os.kill(os.getpid(), signal.SIGTERM)             # the group's SIGTERM: a Ctrl-C, not the end
        time.sleep(0.5)
    except KeyboardInterrupt:
        return "interrupted"
    return "not interrupted"


def _in_turn(*signals: int) -> str:
    """Each of ``signals`` sent to the task's own worker in turn: the name of each that interrupted the
    task, "-" for each that did not."""
    import time
    seen = []
    for sig in signals:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(0.2)
            seen.append("-")
        except KeyboardInterrupt:
            seen.append(signal.Signals(sig).name)
    return " ".join(seen)


def _two_runs():
    import time

    from solvers.interrupts import graceful_stop
    with graceful_stop() as first:
        os.kill(os.getpid(), signal.SIGTERM)
        while not first:
            time.sleep(0.02)
    with graceful_stop() as second:               # the task's next run (particles after a PDE)
        return f"{first.why}; then {second.why if second else 'not asked'}"


def _queued():
    return "ran"


@pytest.mark.parametrize("task, outcome", [
    (_ctrl_c_during_a_write, "the write finished, then the run was interrupted"),
    (_forwarded_after_ctrl_c, "its interrupted state written, not interrupted twice"),
    (_forwarded_alone, "interrupted"),
    (_sigterm, "interrupted"),
    # the owner's forwarded signal may come before the group's own (the same interrupt); a Ctrl-C after both
    # is a second interrupt
    (functools.partial(_in_turn, FORWARDED_SIGNAL, signal.SIGTERM, signal.SIGINT), "SIGUSR1 - SIGINT"),
    # a second SIGTERM is the same stop (Python >= 3.12's executor sends two to a broken pool's workers), a
    # Ctrl-C after it a second interrupt
    (functools.partial(_in_turn, signal.SIGTERM, signal.SIGTERM, signal.SIGINT), "SIGTERM - SIGINT"),
    # an interrupted task's next run stops after its first step (it starts asked to)
    (_two_runs, "interrupted by SIGTERM; then interrupted by SIGTERM"),
])
def test_an_interrupted_worker_finishes_its_task_as_interrupted_and_starts_no_other(task, outcome):
    """A Ctrl-C held by an archive write still interrupts the run once the write is done; the signal an
    interrupted owner forwards interrupts a task that no Ctrl-C reached, and not one that is already
    writing its interrupted state; in every case the task queued behind it never starts."""
    from solvers.app.executor import LocalPool, TaskInterrupted
    with LocalPool(1) as pool:
        first, second = pool.submit(task), pool.submit(_queued)
        assert first.result(timeout=60) == outcome
        with pytest.raises(TaskInterrupted):
            second.result(timeout=60)


SPHERE = """
[model]
d = 3
beta = 1.0
flow = "descent"
[model.perceptron]
units = 3
activation = "relu"
seed = 5
[pde]
degree = 16
t_final = 0.2
"""


@pytest.mark.slow
def test_sphere_sweep_with_local_workers_finishes(tmp_path):
    """A sweep of S^2 members on local workers, OpenMP at two threads. The sweep's own process has run
    SHTns (libgomp) before it forks its workers, and libgomp is not fork-safe: the worker's first parallel
    region of two threads waited forever for the owner's OpenMP threads, which a fork does not copy (every
    such sweep hung at its first member, and Ctrl-C did not stop it). The workers now set one OpenMP thread
    through the runtime's API (solvers.app.executor.run_single_threaded)."""
    (tmp_path / "s.toml").write_text(SPHERE)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2")
    cmd = [sys.executable, "-m", "solvers.app.cli", "sweep", str(tmp_path / "s.toml"), "--beta", "1,2",
           "--workers", "2", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        # a hang guard, far from the sweep's time: 24-31 s at load ~10 (its members' node continuation and
        # error-estimate rerun, 17 s each), more on a busier machine; the workers that hung waited for ever
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the sweep of S^2 members did not end within 600 s (its workers hang)")
    assert proc.returncode == 0, err
    for beta in (1, 2):
        run = load(tmp_path / "out" / f"s_beta{beta}.h5")
        assert run.status == "finished" and run.pde.t[-1] == pytest.approx(0.2)
    # SHTns asks for its own thread count (pde.threads), which a forked worker cannot run: refused up front
    (tmp_path / "t.toml").write_text(SPHERE.replace("[pde]", "[pde]\nthreads = 2"))
    r = _cli("sweep", tmp_path / "t.toml", "--beta", "1,2", "--out", tmp_path / "t", cwd=tmp_path)
    assert r.returncode == 2 and "pde.threads = 2" in r.stderr and "--scheduler" in r.stderr, r.stderr
    assert not (tmp_path / "t").exists()
