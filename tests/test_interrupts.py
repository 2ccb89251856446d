"""Ctrl-C (and the command's SIGTERM) stop a run after its current step and keep its state there
(``solvers.interrupts``): the run continued from that state is the uninterrupted run, bit for bit, in each
phase (spectral steps, node steps, particles); a second signal stops at once; the process's own handlers
are left as they were and still decide."""
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from solvers import Model, Perceptron, simulate_particles, solve_pde
from solvers.app.archive import load
from solvers.interrupts import graceful_stop

ROOT = Path(__file__).resolve().parents[1]
SIGNAL_AFTER_TIME = str(ROOT / "tests" / "signal_after_time.py")


def _signal_once_after(t_signal: float, count: int = 1, phase_key: str | None = None):
    """A progress callable that sends SIGINT to this process ``count`` times at the first step past
    ``t_signal`` (of the main run: not the error-estimate rerun)."""
    sent = []

    def progress(info):
        if "check" not in info and info["t"] > t_signal and not sent:
            sent.append(True)
            for _ in range(count):
                os.kill(os.getpid(), signal.SIGINT)
    return progress


def _concatenated_steps(a, b, key="dt"):
    return np.concatenate([a.steps[key], b.steps[key]])


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("case", ["spectral", "nodes"])
def test_ctrl_c_stops_the_pde_after_its_step_and_the_resume_is_the_uninterrupted_run(case):
    if case == "spectral":      # noise: the spectral phase to the end
        m = Model(2, 2.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111), noise=0.05)
        args, kw, t_signal = (m, 1.0, 64), dict(save_every=0.25, max_degree=512), 0.6
    else:                       # no noise: the handoff at t ~ 0.02, then the node phase
        m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
        args, kw, t_signal = (m, 2.0, 128), dict(save_every=0.5), 1.2
    full = solve_pde(*args, **kw)
    cut = solve_pde(*args, **kw, progress=_signal_once_after(t_signal))
    assert cut.stop_reason == "interrupted" and "its state is kept" in cut.message, cut.message
    # stopped at the first step past the signal, between two snapshots, and that state is the restart's
    assert t_signal < cut.t_stop < t_signal + 0.1 and cut.t[-1] < cut.t_stop
    assert cut.restart["t"] == cut.t_stop and cut.restart["last_snapshot_t"] == cut.t[-1]
    assert (cut.restart.get("phase") == "lagrangian") == (case == "nodes")
    rest = solve_pde(*args, **kw, restart=cut.restart)
    assert np.array_equal(np.concatenate([cut.t, rest.t]), full.t)
    assert np.array_equal(rest.coeffs[-1], full.coeffs[-1]) and rest.nsteps == full.nsteps
    if case == "spectral":
        assert np.array_equal(_concatenated_steps(cut, rest), full.steps["dt"])
    else:
        assert rest.lagrangian.node_nsteps == full.lagrangian.node_nsteps
        assert np.array_equal(rest.atoms().masses, full.atoms().masses)
        assert np.array_equal(rest.atoms().mass_errors, full.atoms().mass_errors)


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("integrator, noise", [("adaptive", 0.0), ("rk4", 0.02)])
def test_ctrl_c_stops_the_particles_after_their_step_and_the_resume_is_the_uninterrupted_run(integrator, noise):
    m = Model(2, 4.0, "descent", perceptron=Perceptron.random(2, 2, "tanh", 1.0, seed=3), noise=noise)
    kw = dict(t_final=2.0, integrator=integrator, dt=None if integrator == "adaptive" else 0.01, save_every=0.5,
              seed=4)
    full = simulate_particles(m, 200, **kw)
    cut = simulate_particles(m, 200, **kw, progress=_signal_once_after(1.1))
    assert cut.stop_reason == "interrupted" and cut.t[-1] < cut.t_stop == cut.restart["t"] < 1.5
    rest = simulate_particles(m, **kw, restart=cut.restart)       # the noise stream continues where it stood
    assert np.array_equal(np.concatenate([cut.t, rest.t]), full.t)
    assert np.array_equal(rest.x[-1], full.x[-1]) and rest.nsteps == full.nsteps


def test_a_second_ctrl_c_stops_at_once_from_the_last_snapshot():
    m = Model(2, 2.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111), noise=0.05)
    cut = solve_pde(m, 1.0, 64, save_every=0.25, max_degree=512, progress=_signal_once_after(0.6, count=2))
    assert cut.stop_reason == "interrupted" and "then at once by a second signal" in cut.message
    assert cut.restart["t"] == cut.t[-1] == 0.5 < cut.t_stop


def test_the_process_handlers_are_kept_and_still_decide():
    term = signal.signal(signal.SIGTERM, signal.SIG_DFL)       # a process without a handler of its own
    try:
        before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        with graceful_stop() as request:
            # SIGTERM without a Python handler (its default action) is left alone; SIGINT is wrapped
            assert signal.getsignal(signal.SIGTERM) == before[1] and signal.getsignal(signal.SIGINT) != before[0]
        assert not request
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    finally:
        signal.signal(signal.SIGTERM, term)

    declined = []                                 # a handler that decides not to interrupt (a pool worker
    old = signal.signal(signal.SIGINT, lambda s, f: declined.append(s))          # between its tasks)
    try:
        with graceful_stop() as request:
            os.kill(os.getpid(), signal.SIGINT)
        assert declined == [signal.SIGINT] and not request
    finally:
        signal.signal(signal.SIGINT, old)

    seen = []                                     # outside the main thread nothing is installed

    def in_a_thread():
        with graceful_stop() as request:
            seen.append(signal.getsignal(signal.SIGINT) is before[0] and not request)
    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert seen == [True]


# --- the command: Ctrl-C and SIGTERM between snapshots, then --resume ------------------------------------
_MODEL = """
[model]
d = 2
beta = {beta}
flow = "ascent"
noise = {noise}
[model.perceptron]
units = 2
activation = "relu"
seed = 111
"""
_PARTICLES = '[particles]\nn = 400\nseed = 7\nintegrator = "rk4"\ndt = 0.01\nt_final = 2.0\nsave_every = 0.25\n'
_NODES = _MODEL.format(beta=6.0, noise=0.0) + "[pde]\ndegree = 256\nt_final = 4.0\nsave_every = 0.5\n"
COMMAND_CASES = {
    # the spectral phase throughout (noise), stopped by SIGTERM (a batch system's time limit, `kill`)
    "spectral": (_MODEL.format(beta=2.0, noise=0.05)
                 + "[pde]\ndegree = 64\nmax_degree = 512\nt_final = 1.0\nsave_every = 0.25\n", 0.6, signal.SIGTERM),
    # past the handoff (t ~ 0.02), in the node phase
    "nodes": (_NODES, 2.2, signal.SIGINT),
    # the same, stopped in the node phase before its first node snapshot (t = 0.5): the handoff is known
    # from the restart state alone
    "nodes-early": (_NODES, 0.1, signal.SIGINT),
    "particles": (_MODEL.format(beta=4.0, noise=0.01) + _PARTICLES, 1.05, signal.SIGINT),
}


def _command(*args, signal_at=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    head = ([sys.executable, SIGNAL_AFTER_TIME, str(signal_at[0]), str(int(signal_at[1]))] if signal_at
            else [sys.executable, "-m", "solvers.app.cli"])
    # SIGINT back to its default in the child: a background job inherits it ignored, and Python installs
    # its KeyboardInterrupt handler only when SIGINT is not ignored at start-up
    return subprocess.run(head + [str(a) for a in args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The archive of the uninterrupted run of a configuration text (each run once per module)."""
    done = {}

    def get(text: str) -> Path:
        if text not in done:
            d = tmp_path_factory.mktemp("full")
            (d / "c.toml").write_text(text)
            assert _command("run", d / "c.toml", "--out", d / "full.h5", "--quiet").returncode == 0
            done[text] = d / "full.h5"
        return done[text]
    return get


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("case", list(COMMAND_CASES))
def test_a_run_stopped_between_snapshots_resumes_from_there_to_the_same_numbers(tmp_path, case, uninterrupted):
    text, t_signal, sig = COMMAND_CASES[case]
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    full, cut = uninterrupted(text), tmp_path / "cut.h5"
    proc = _command("run", cfg, "--out", cut, "--quiet", signal_at=(t_signal, sig))
    assert proc.returncode == 128 + sig, proc.stderr
    stage = "particles" if case == "particles" else "pde"
    part = getattr(load(cut), stage)
    assert load(cut).status == "interrupted" and part.stop_reason == "interrupted"
    # the state kept is that of the step after the signal, past the last snapshot written
    assert part.t[-1] < part.restart["t"] == part.t_stop < t_signal + 0.1, (part.t, part.t_stop)
    assert part.restart["last_snapshot_t"] == part.t[-1]
    info = _command("info", cut).stdout
    assert "a state kept after its last snapshot" in info
    if case.startswith("nodes"):             # where the continuation began (before the cut), and its steps so far
        t_handoff = load(full).pde.lagrangian.handoff.t
        assert f"handoff to the Lagrangian continuation at t = {t_handoff:.6g} " in info, info
        assert 0.01 < t_handoff < 0.02 and " node steps" in info, info
    r = _command("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0 and "a state kept after the last snapshot" in r.stderr, r.stderr
    done, ref = load(cut), load(full)
    a, b = getattr(done, stage), getattr(ref, stage)
    assert done.status == "finished" and a.stop_reason == b.stop_reason and np.array_equal(a.t, b.t)
    assert a.nsteps == b.nsteps
    if stage == "particles":
        assert np.array_equal(a.x, b.x) and np.array_equal(a.energy, b.energy)
    else:
        assert np.array_equal(a.coeffs, b.coeffs) and np.array_equal(a.density, b.density)
        for k in ("t", "dt", "error", "accepted"):     # every attempted step, once, in order
            assert np.array_equal(a.steps[k], b.steps[k]), k
    if case.startswith("nodes"):
        assert np.array_equal(done.atoms["pde"][1], ref.atoms["pde"][1])
        assert np.array_equal(done.atoms["pde:mass_errors"], ref.atoms["pde:mass_errors"])


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("case", ["spectral", "particles"])
def test_a_killed_run_resumes_from_its_last_checkpoint_to_the_same_numbers(tmp_path, case):
    """kill -9 between snapshots: the archive holds the state of the last checkpoint ([run]
    checkpoint_interval of wall clock), after the last snapshot, and the resume from it is the
    uninterrupted run. The interval, 1 ns, keeps a state after every step: with a few milliseconds, a fast
    machine (AMD EPYC family 26) took the five particle steps from the last snapshot to the kill within
    one interval and kept none after the snapshot."""
    text, t_signal, _ = COMMAND_CASES[case]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\ncheckpoint_interval = 1e-9\n" + text)
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert _command("run", cfg, "--out", full, "--quiet").returncode == 0
    proc = _command("run", cfg, "--out", cut, "--quiet", signal_at=(t_signal, signal.SIGKILL))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stage = "particles" if case == "particles" else "pde"
    part = getattr(load(cut), stage)
    assert load(cut).status == "running" and part.stop_reason == "killed"
    assert part.t[-1] == part.restart["last_snapshot_t"] < part.restart["t"] <= t_signal + 0.1, part.restart["t"]
    r = _command("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0 and "a state kept after the last snapshot" in r.stderr, r.stderr
    a, b = getattr(load(cut), stage), getattr(load(full), stage)
    assert np.array_equal(a.t, b.t) and a.nsteps == b.nsteps
    if stage == "particles":
        assert np.array_equal(a.x, b.x)
    else:
        assert np.array_equal(a.coeffs, b.coeffs)
        for k in ("t", "dt", "error", "accepted"):
            assert np.array_equal(a.steps[k], b.steps[k]), k


@pytest.mark.slow
@pytest.mark.parametrize("case", ["spectral", "particles"])
def test_a_signal_in_the_last_step_lets_the_run_finish(tmp_path, case):
    """The step that lands on t_final ends the run for its own reason: a Ctrl-C that came during it does
    not leave a restart state at t_final that nothing could continue from (the run finishes, exit 0)."""
    text, _, _ = COMMAND_CASES[case]
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert _command("run", cfg, "--out", full, "--quiet").returncode == 0
    t_final = {"spectral": 1.0, "particles": 2.0}[case]
    proc = _command("run", cfg, "--out", cut, "--quiet", signal_at=(t_final, signal.SIGINT))
    assert proc.returncode == 0, proc.stderr
    stage = "particles" if case == "particles" else "pde"
    a, b = getattr(load(cut), stage), getattr(load(full), stage)
    assert load(cut).status == "finished" and a.stop_reason == "t_final"
    assert np.array_equal(a.t, b.t) and a.nsteps == b.nsteps        # no snapshot twice


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_a_signal_in_the_step_that_ends_a_stage_stops_before_the_next_stage(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(COMMAND_CASES["spectral"][0] + _PARTICLES)          # the PDE to t = 1, then particles
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert _command("run", cfg, "--out", full, "--quiet").returncode == 0
    proc = _command("run", cfg, "--out", cut, "--quiet", signal_at=(1.0, signal.SIGTERM))
    assert proc.returncode == 143, proc.stderr
    run = load(cut)
    assert run.status == "interrupted" and run.pde.stop_reason == "t_final" and run.particles is None
    assert np.array_equal(run.pde.coeffs, load(full).pde.coeffs)
    r = _command("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0 and "[pde] already complete" in r.stderr, r.stderr
    assert np.array_equal(load(cut).particles.x, load(full).particles.x)


def test_sigterm_waits_for_an_archive_write_as_ctrl_c_does():
    """``deferred_interrupt`` holds what the command's SIGTERM handler raises until the write is done (a
    restart state cut between its arrays and its attribute would resume to other numbers)."""
    from solvers.app.runner import deferred_interrupt

    def raising(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, raising)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with deferred_interrupt():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("the write went on")
        assert done == ["the write went on"]
    finally:
        signal.signal(signal.SIGTERM, old)


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("case, write", [("spectral", "12"), ("particles", "12"), ("spectral", "batch:2"),
                                         ("particles", "batch:2")])
def test_a_kill_inside_a_restart_write_leaves_the_previous_state_whole(tmp_path, case, write):
    """kill -9 after a restart state's arrays reached the file and before its attribute: the archive still
    holds the previous state whole (the arrays go to the slot the current state does not use), and the
    resume is the uninterrupted run. The 12th write is a checkpoint's (a state after every step, early in
    the run); the write of the second batch of snapshots (t = 0.25) comes with that snapshot's rows."""
    text, _, _ = COMMAND_CASES[case]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\ncheckpoint_interval = 1e-9\n" + text)
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert _command("run", cfg, "--out", full, "--quiet").returncode == 0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "kill_in_restart_write.py"), write, "run", str(cfg),
                           "--out", str(cut), "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stage = "particles" if case == "particles" else "pde"
    if write.startswith("batch"):         # the state kept is the checkpoint of the step before t = 0.25
        kept = getattr(load(cut), stage).restart
        assert kept["last_snapshot_t"] == 0.0 and 0.2 < kept["t"] < 0.25, kept["t"]
    r = _command("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    a, b = getattr(load(cut), stage), getattr(load(full), stage)
    assert np.array_equal(a.t, b.t) and a.nsteps == b.nsteps
    if stage == "particles":
        assert np.array_equal(a.x, b.x) and np.array_equal(a.energy, b.energy)
    else:
        assert np.array_equal(a.coeffs, b.coeffs)
        for k in ("t", "dt", "error", "accepted"):
            assert np.array_equal(a.steps[k], b.steps[k]), k


@pytest.mark.cpu_dependent
def test_checkpoints_leave_a_finished_archive_as_without_them(tmp_path):
    """A stage that ends between snapshots for a reason of its own (max_steps here): its step log is whole
    and its restart state is the last snapshot's, however many checkpoints came."""
    text = COMMAND_CASES["spectral"][0] + "max_steps = 120\n"
    runs = {}
    for interval in (60.0, 1e-9):
        cfg = tmp_path / f"c{interval}.toml"
        cfg.write_text(f"[run]\ncheckpoint_interval = {interval}\n" + text)
        out = tmp_path / f"a{interval}.h5"
        assert _command("run", cfg, "--out", out, "--quiet").returncode == 0
        runs[interval] = load(out).pde
    a, b = runs[60.0], runs[1e-9]
    assert a.stop_reason == b.stop_reason == "max_steps" and a.nsteps == 120
    assert len(a.steps["t"]) == a.nsteps + a.nrejected
    for k in ("t", "dt", "error", "accepted"):
        assert np.array_equal(a.steps[k], b.steps[k]), k
    assert a.restart["t"] == b.restart["t"] == a.t[-1]
    assert np.array_equal(a.restart["coeffs"], b.restart["coeffs"])
    # the same objects in both files: the restart state of a complete stage is in slot a only
    names = []
    for interval in (60.0, 1e-9):
        with h5py.File(tmp_path / f"a{interval}.h5", "r") as f:
            seen = []
            f.visit(seen.append)
            names.append(sorted(seen))
    assert names[0] == names[1] and "pde/restart/a/coeffs" in names[0] and "pde/restart/b" not in names[0]


def test_a_stage_settles_its_restart_state_while_a_handle_to_its_attribute_is_open(tmp_path):
    """A frame that holds h5py's handle of the ``state`` attribute (Dask's worker profiler samples the
    frames of its tasks every 10 ms) while the writer rewrites it: HDF5 keeps opening a deleted attribute
    under its name with its old value, so a state rewritten by delete and create read back stale, the
    settle of a complete stage kept the state in slot b and deleted b (seen once: a sweep member on the
    cluster, "object 'b' doesn't exist"). Rewritten in place, every handle reads the new value."""
    import json
    from types import SimpleNamespace

    from solvers.app.archive import ArchiveWriter
    path = tmp_path / "a.h5"
    w = ArchiveWriter(path, "create", model=Model(2, 1.0, "ascent"), flush_interval=0.0)
    w.particles_begin(np.ones(3) / 3, {}, "uniform")

    def snap(t):
        x = np.zeros((3, 2))
        x[:, 0] = 1.0
        return {"t": t, "x": x, "energy": 0.0,
                "restart": {"t": t, "x": x, "w": np.ones(3) / 3, "nsteps": 1, "nrejected": 0}}
    w.particles_snapshot(snap(0.0))
    w.write_pending()                                              # the state in slot a
    held = h5py.h5a.open(w.f["particles/restart"].id, b"state")   # as a sampled frame keeps it
    w.particles_snapshot(snap(0.1))
    w.write_pending()                                              # the state in slot b
    assert json.loads(w.f["particles/restart"].attrs["state"])["slot"] == "b"
    done = SimpleNamespace(stop_reason="t_final", message="", t_stop=0.1, nsteps=1, nrejected=0, wall_time=0.0,
                           restart=None)
    w._finish_stage("particles", done)
    w._finish_restart("particles", done, None)
    del held
    w.close()
    with h5py.File(path, "r") as f:
        r = f["particles/restart"]
        assert json.loads(r.attrs["state"])["slot"] == "a" and list(r) == ["a"]
    assert load(path).particles.restart["t"] == 0.1


def test_validate_marks_its_part_archive_interrupted_whichever_step_the_signal_came_in(tmp_path):
    cfg = tmp_path / "v.toml"
    cfg.write_text(COMMAND_CASES["spectral"][0] + _PARTICLES.replace("t_final = 2.0", "t_final = 1.0"))
    out = tmp_path / "v.h5"
    # in the step that lands on the PDE's t_final: the PDE stage ends complete, the study stops
    proc = _command("validate", cfg, "--n", "50,100", "--workers", "1", "--out", out, signal_at=(1.0, signal.SIGINT))
    assert proc.returncode == 130, proc.stderr
    part = load(tmp_path / "v.h5.part")
    assert part.status == "interrupted" and part.pde.stop_reason == "t_final" and not out.exists()


_TO_THE_END = ('[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[initial]\nkind = "zonal_harmonic"\ndegree = 2\n'
               'amplitude = 0.5\n[pde]\ndegree = 32\nt_final = inf\nsave_every = 1.0\nnodes = 256\n'
               'handoff_degree = 128\n')


def _all_datasets(path: Path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("sig, t_signal", [(signal.SIGINT, 6.0), (signal.SIGTERM, 30.0)])
def test_a_run_to_its_end_resumed_keeps_every_dataset_of_the_uninterrupted_one(tmp_path, uninterrupted, sig,
                                                                               t_signal):
    """A t_final = inf run (the antipodal pair of tests/test_terminal.py: a plateau, its kick, the merge, the
    certified end) cut in its continuation, before and after the plateau, and resumed: the archive holds every
    dataset of the uninterrupted run with the same values, the atoms' error bars of /atoms/pde included (a
    resume read the atoms back and lost them)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(_TO_THE_END)
    full, cut = uninterrupted(_TO_THE_END), tmp_path / "cut.h5"
    proc = _command("run", cfg, "--out", cut, "--quiet", signal_at=(t_signal, sig))
    assert proc.returncode == 128 + sig, proc.stderr
    assert load(cut).status == "interrupted"
    r = _command("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    a, b = _all_datasets(cut), _all_datasets(full)
    assert sorted(a) == sorted(b)
    # the step log of an interrupted run repeats the attempt it was stopped in; every other dataset is equal
    differ = [k for k in b if not (np.array_equal(a[k], b[k]) if a[k].dtype.kind != "f" else
                                   np.array_equal(a[k], b[k], equal_nan=True))]
    assert differ == [], differ
    for k in ("mass_errors", "position_errors"):
        assert f"atoms/pde/{k}" in a
    info = _command("info", cut)
    assert info.returncode == 0 and "terminal state: certified" in info.stdout
