"""Configurations, the attnpde command and HDF5 archives: bad input, round trips, kill -9, Ctrl-C, resume."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from solvers import Model, Perceptron, solve_pde
from solvers.app.archive import ArchiveError, load
from solvers.app.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]
SIGNAL_AFTER_ROWS = str(ROOT / "tests" / "signal_after_rows.py")

PDE_CFG = """
[run]
name = "t"
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
t_final = {t_final}
save_every = {save_every}
max_degree = {max_degree}
tail_max = 1e-2
"""

# 126 snapshots: cut after the third (see _run_until_signalled)
LONG_PDE_CFG = PDE_CFG.format(t_final=2.5, save_every=0.02, max_degree=2048)


def cli(*args, cwd=ROOT, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solvers.app.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# --- configuration validation ------------------------------------------------------------------------
BASE = '[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n'
PDE = '[pde]\ndegree = 32\nt_final = 1.0\n'


BAD_CONFIGS = [
    (BASE + PDE + "[extra]\nx = 1\n", "extra", "unknown key"),
    (BASE + "betta = 2\n" + PDE, "model.betta", "unknown key"),
    (BASE + PDE + "tolerance = 1e-3\n", "pde.tolerance", "unknown key"),
    ('[model]\nd = 2\nbeta = "one"\nflow = "ascent"\n' + PDE, "model.beta", "must be a number"),
    ('[model]\nd = 2\nbeta = -1.0\nflow = "ascent"\n' + PDE, "model.beta", ">= 0"),
    ('[model]\nd = 2.0\nbeta = 1.0\nflow = "ascent"\n' + PDE, "model.d", "must be an integer"),
    ('[model]\nd = 1\nbeta = 1.0\nflow = "ascent"\n' + PDE, "model.d", ">= 2"),
    ('[model]\nd = 2\nbeta = 1.0\nflow = "up"\n' + PDE, "model.flow", "'ascent', 'descent'"),
    ('[model]\nd = 2\nbeta = 1.0\n' + PDE, "model.flow", "is required"),
    (BASE + 'attention = "normalized"\nstrength = 2.0\n' + PDE, "model.strength", "plays no role"),
    (BASE + "noise = -0.1\n" + PDE, "model.noise", ">= 0"),
    ('[model]\nd = 5\nbeta = 1.0\nflow = "ascent"\n' + PDE, "pde", "circle (d = 2) and the sphere (d = 3)"),
    (BASE + "[pde]\ndegree = 64\nt_final = 1.0\nmax_degree = 32\n", "pde.max_degree", ">= pde.degree"),
    (BASE + "[pde]\ndegree = 64\nt_final = 1.0\nsave_every = 2.0\n", "pde.save_every", "<= pde.t_final"),
    (BASE + "[pde]\ndegree = 64\nt_final = 1.0\ntail_tol = 1e-2\ntail_max = 1e-3\n", "pde", "tail_max"),
    (BASE + "[pde]\ndegree = 2\nt_final = 1.0\n", "pde.degree", ">= 4"),
    (BASE + '[pde]\ndegree = 64\nt_final = 1.0\nmethod = "RK45"\n', "pde.method", "'DP54', 'BS32'"),
    (BASE + "[pde]\ndegree = 64\nt_final = 0\n", "pde.t_final", "> 0"),
    (BASE + "[pde]\ndegree = 64\n", "pde.t_final", "is required"),
    (BASE + "[model.perceptron]\nunits = 2\nactivation = \"softplus\"\n" + PDE, "model.perceptron.activation", "'relu'"),
    (BASE + "[model.perceptron]\na = [[1.0, 0.0, 0.0]]\nc = [1.0]\n" + PDE, "model.perceptron.a", "d = 2 entries"),
    (BASE + "[model.perceptron]\na = [[0.0, 0.0]]\nc = [1.0]\n" + PDE, "model.perceptron", "direction a_0 is zero"),
    (BASE + "[model.perceptron]\na = [[1.0, 0.0]]\n" + PDE, "model.perceptron", "exactly one of c"),
    (BASE + "[model.perceptron]\nunits = 2\na = [[1.0, 0.0]]\nc = [1.0]\n" + PDE, "model.perceptron", "not both"),
    (BASE + '[initial]\nkind = "von_mises"\nmu = [1.0, 0.0, 0.0]\nkappa = 2.0\n' + PDE, "initial.mu", "d = 2 entries"),
    (BASE + '[initial]\nkind = "von_mises"\nmu = [1.0, 0.0]\n' + PDE, "initial.kappa", "is required"),
    (BASE + '[initial]\nkind = "zonal_harmonic"\ndegree = 2\namplitude = 1.5\n' + PDE, "initial.amplitude", "<= 1"),
    (BASE + PDE + "[compare]\nmoments = 4\n", "compare", "needs both"),
    (BASE, "", "nothing to run"),
    (BASE + PDE + "[pde\n", "", "not valid TOML"),
]


@pytest.mark.parametrize("text, path, what", BAD_CONFIGS)
def test_bad_configuration_is_refused(text, path, what):
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert e.value.path == path and what in str(e.value), str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("text, path, what", BAD_CONFIGS)
def test_bad_configuration_is_refused_by_the_command(tmp_path, text, path, what):
    """The command line: exit status 2, one clear line naming the key path, no traceback, no file."""
    cfg = write(tmp_path, text)
    r = cli("run", cfg)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and (path or "attnpde: error") in r.stderr and what in r.stderr
    assert not cfg.with_suffix(".h5").exists()


def test_example_configurations_are_valid():
    configs = sorted((ROOT / "runs").glob("*.toml"))
    assert configs
    for p in configs:
        load_config(p)


# --- run, archive, load ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_round_trip_run_archive_load(tmp_path):
    cfg = write(tmp_path, PDE_CFG.format(t_final=1.0, save_every=0.25, max_degree=512))
    r = cli("run", cfg, "--quiet")
    assert r.returncode == 0, r.stderr
    run = load(cfg.with_suffix(".h5"))
    # the same run in memory
    model = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    ref = solve_pde(model, 1.0, 64, save_every=0.25, max_degree=512, tail_max=1e-2)
    pde = run.pde
    assert run.status == "finished" and pde.stop_reason == ref.stop_reason
    assert np.array_equal(pde.t, ref.t) and np.array_equal(pde.degree, ref.degree)
    assert np.array_equal(pde.coeffs, ref.coeffs) and np.array_equal(pde.density, ref.density)
    for k in ("energy", "mass", "min_density", "tail", "dissipation"):
        assert np.array_equal(getattr(pde, k), getattr(ref, k)), k
    assert np.array_equal(pde.steps["dt"], ref.steps["dt"]) and pde.refinements == [tuple(map(float, r)) for r in ref.refinements]
    assert np.array_equal(run.model.perceptron.a, model.perceptron.a)
    assert np.allclose(run.atoms["pde"][1], ref.atoms().masses)
    with h5py.File(cfg.with_suffix(".h5")) as f:
        assert f.attrs["format"] == "attnpde-run" and "beta = 1.0" in f.attrs["config"]
        assert f["pde/energy"].dims[0][0] == f["pde/t"]          # time axis attached as a dimension scale
        assert f["pde/density"].compression is None and f["pde/coeffs"].compression is None   # the default
    # compression = "density": the density gzipped, one snapshot per chunk, the same values
    dense = tmp_path / "gz" / "c.toml"
    dense.parent.mkdir()
    dense.write_text(cfg.read_text().replace("[run]\n", '[run]\ncompression = "density"\n', 1))
    assert cli("run", dense, "--quiet").returncode == 0
    with h5py.File(dense.with_suffix(".h5")) as f:
        assert f["pde/density"].compression == "gzip" and f["pde/coeffs"].compression is None
        assert f["pde/density"].chunks[1:] == f["pde/density"].shape[1:]     # whole snapshots per chunk
        assert np.array_equal(f["pde/density"][()], ref.density)
    info = cli("info", cfg.with_suffix(".h5"))
    assert info.returncode == 0 and "ended: resolution" in info.stdout or "ended: t_final" in info.stdout
    assert "atoms:" in info.stdout
    # its reader gone before it writes (as `attnpde info A | head` once head has exited): quiet, 128 + SIGPIPE
    r, w = os.pipe()
    os.close(r)
    try:
        closed = subprocess.run([sys.executable, "-m", "solvers.app.cli", "info", str(cfg.with_suffix(".h5"))],
                                cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=w,
                                stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    assert closed.returncode == 128 + signal.SIGPIPE and closed.stderr == "", closed.stderr
    plot = cli("plot", cfg.with_suffix(".h5"), "--out", tmp_path / "png")
    assert plot.returncode == 0, plot.stderr
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert {p.name for p in pngs} >= {"spacetime.png", "final.png", "energy.png"}
    assert all(p.stat().st_size > 10_000 for p in pngs)


def _wait_for_the_commands_handlers(proc, timeout=60.0):
    """Return once the command's own signal handlers are in place (``solvers.app.cli.main`` catches SIGTERM,
    which the interpreter alone leaves at its default; read from /proc; without /proc at once). Before them a
    Ctrl-C meets the interpreter's start-up, not the command: SIGINT's default action until Python installs
    its handler, then a KeyboardInterrupt traceback from site or runpy (under load 11 a Ctrl-C 0.3 s after
    the start landed there in 1 run of 6, 0.22 s after in 3 of 6)."""
    status = Path(f"/proc/{proc.pid}/status")
    end = time.monotonic() + timeout
    while proc.poll() is None:
        try:
            caught = next(int(line.split()[1], 16) for line in status.read_text().splitlines()
                          if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            return
        if caught >> (signal.SIGTERM - 1) & 1:
            return
        assert time.monotonic() < end, f"the command set no handler within {timeout:g} s"
        time.sleep(0.001)


@pytest.mark.parametrize("delay", [0.3, 0.7])
def test_ctrl_c_while_the_command_starts_ends_it_in_one_line(tmp_path, delay):
    """Ctrl-C in the command's first second (its imports of numpy, scipy, h5py, ...; or its first steps on
    a loaded machine), counted from when its handlers are in place: exit 130, one line, no traceback,
    wherever the signal lands (in a compiled module's initialisation it surfaces as that import's
    ImportError)."""
    cfg = write(tmp_path, LONG_PDE_CFG)
    proc = subprocess.Popen([sys.executable, "-m", "solvers.app.cli", "run", str(cfg), "--quiet"], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL),      # SIGTERM too:
                                                signal.signal(signal.SIGTERM, signal.SIG_DFL)))    # see the wait
    _wait_for_the_commands_handlers(proc)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    # -SIGINT: CPython ends a process by SIGINT at exit when a KeyboardInterrupt went through code that a
    # module ran with exec() of a string (dataclasses does), even though it was caught; a shell reports
    # that as 130 too
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in err, (proc.returncode, err)
    assert "interrupted" in err, err


@pytest.mark.slow
def test_a_run_whose_message_reader_is_gone_runs_to_its_end(tmp_path):
    """`attnpde run CFG 2>&1 | head` once head has exited: the run's messages (stderr) go nowhere, and the
    run is not lost for it: it ends, its archive finished and whole, and the command's own output (stdout,
    here still read) says so. Before, the first message after the reader left failed the run."""
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.5, save_every=0.25, max_degree=256))
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "solvers.app.cli", "run", str(cfg)], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, stderr=w,
                              text=True, timeout=300)
    finally:
        os.close(w)
    assert proc.returncode == 0 and "(finished)" in proc.stdout, proc.stdout
    run = load(cfg.with_suffix(".h5"))
    assert run.status == "finished" and run.pde.t[-1] == 0.5 and run.pde.stop_reason in ("t_final", "resolution")
    # its info says how it ended; an unfinished archive's says how to continue it, and a directory is refused
    # in one line
    assert "not finished" not in cli("info", cfg.with_suffix(".h5")).stdout
    d = cli("info", tmp_path)
    assert d.returncode == 2 and d.stderr.strip().endswith(
        f"a directory, not an archive (it holds 1 archive(s), e.g. {cfg.with_suffix('.h5')})"), d.stderr
    # a sweep's folder: its summary and its members named
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "summary.json").write_text("[]")
    (tmp_path / "sw" / "sw_beta1.h5").write_bytes(cfg.with_suffix(".h5").read_bytes())
    d = cli("info", tmp_path / "sw")
    assert d.returncode == 2 and d.stderr.strip().endswith(
        "(a sweep's folder: its summary.json has the table; each member is an archive, e.g. "
        f"{tmp_path / 'sw' / 'sw_beta1.h5'})"), d.stderr
    assert cli("info", tmp_path / "empty").returncode == 2
    (tmp_path / "empty").mkdir()
    assert cli("info", tmp_path / "empty").stderr.strip().endswith("a directory, not an archive")
    bad = cli("plot", cfg.with_suffix(".h5"), "--out", cfg)            # a file where the directory should be
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--out" in bad.stderr, bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("stderr", ["closed", "full"])
def test_a_run_whose_messages_cannot_be_written_runs_to_its_end(tmp_path, stderr):
    """`attnpde run CFG 2>&-` and `2>/dev/full`. Closed, descriptor 2 was the next file opened, and the
    run failed at its first message with its archive left "running"; full, each message raised ENOSPC and
    the run ended "failed". Both now run to their end, the archive finished and whole; `info > /dev/full`
    says in one line that it cannot write, with no traceback."""
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.5, save_every=0.25, max_degree=256))
    full = open("/dev/full", "w")
    try:
        proc = subprocess.run([sys.executable, "-m", "solvers.app.cli", "run", str(cfg)], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True,
                              timeout=300, **({"stderr": full} if stderr == "full" else
                                              {"preexec_fn": lambda: os.close(2)}))
        info = subprocess.run([sys.executable, "-m", "solvers.app.cli", "info", str(cfg.with_suffix(".h5"))],
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300)
        # bad input is still bad input (2) when its one line cannot be written
        missing = subprocess.run([sys.executable, "-m", "solvers.app.cli", "run", str(tmp_path / "none.toml")],
                                 cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                                 stderr=full, timeout=300)
    finally:
        full.close()
    assert missing.returncode == 2
    assert proc.returncode == 0 and "(finished)" in proc.stdout, proc.stdout
    run = load(cfg.with_suffix(".h5"))
    assert run.status == "finished" and run.pde.t[-1] == 0.5
    assert info.returncode == 1 and info.stderr.strip() == (
        "attnpde: error: cannot write the output: [Errno 28] No space left on device"), info.stderr


@pytest.mark.slow
def test_existing_archive_is_not_overwritten(tmp_path):
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.2, save_every=0.1, max_degree=256))
    assert cli("run", cfg, "--quiet").returncode == 0
    out = cfg.with_suffix(".h5")
    before = out.read_bytes()
    r = cli("run", cfg, "--quiet")
    assert r.returncode == 2 and "exists; use --force" in r.stderr and out.read_bytes() == before
    assert cli("run", cfg, "--quiet", "--force").returncode == 0
    r = cli("run", cfg, "--resume")
    assert r.returncode == 2 and "already finished" in r.stderr


def _run_until_signalled(cfg, out, sig, after=3):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # SIGINT back to its default in the child: a shell's background job inherits it ignored, and Python
    # installs its KeyboardInterrupt handler only when SIGINT is not ignored at start-up
    # the child signals itself once its archive holds ``after`` snapshots (tests/signal_after_rows.py)
    return subprocess.run([sys.executable, SIGNAL_AFTER_ROWS, str(after), str(int(sig)), "run", str(cfg),
                           "--out", str(out), "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _full_and_cut(tmp_path, cfg, sig, after=3):
    """Run ``cfg`` uninterrupted into full.h5, and again into cut.h5 stopped by ``sig`` after ``after``
    snapshots."""
    full = tmp_path / "full.h5"
    assert cli("run", cfg, "--out", full, "--quiet").returncode == 0
    cut = tmp_path / "cut.h5"
    proc = _run_until_signalled(cfg, cut, sig, after)
    return full, cut, proc


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_or_interrupted_run_resumes_to_the_same_numbers(tmp_path, sig):
    text = LONG_PDE_CFG
    cfg = write(tmp_path, text)
    full, cut, proc = _full_and_cut(tmp_path, cfg, sig)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), proc.stderr
    run = load(cut)                                       # readable after the kill / interrupt
    assert run.status == ("interrupted" if sig == signal.SIGINT else "running")
    info = cli("info", cut).stdout
    assert f"--out {cut} --resume` continues it" in info, info
    assert ("wall not recorded" in info) == (sig == signal.SIGKILL), info
    n_cut = len(run.pde.t)
    ref = load(full).pde
    assert 2 <= n_cut < len(ref.t), "the run was not cut in the middle"
    assert np.array_equal(run.pde.t, ref.t[:n_cut])
    r = cli("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    done = load(cut)
    assert done.status == "finished" and done.pde.stop_reason == ref.stop_reason
    assert np.array_equal(done.pde.t, ref.t)
    assert np.abs(done.pde.coeffs - ref.coeffs).max() <= 1e-12
    assert np.abs(done.pde.energy - ref.energy).max() <= 1e-12
    # the density's chunks after the resume start on the file's chunk boundaries, not the new batch's
    assert np.abs(done.pde.density - ref.density).max() <= 1e-12
    assert done.pde.nsteps == ref.nsteps and np.array_equal(done.pde.steps["dt"], ref.steps["dt"])


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_a_run_killed_before_its_first_snapshot_resumes_from_t_0_and_says_so(tmp_path):
    # the archive exists (its model, its status "running") but holds no snapshot: info and the resume say
    # that the stages start over, and the resumed run is the uninterrupted one
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.5, save_every=0.1, max_degree=64)
                + "[particles]\nn = 50\nt_final = 0.5\nsave_every = 0.1\n")
    cut, full = tmp_path / "cut.h5", tmp_path / "full.h5"
    script = ("import os, sys\nfrom solvers.app import archive, cli\n"
              "archive.ArchiveWriter.pde_snapshot = lambda self, snap: os._exit(9)\n"
              f"sys.exit(cli.main(['run', {str(cfg)!r}, '--out', {str(cut)!r}, '--quiet']))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr
    run = load(cut)
    assert run.status == "running" and run.pde is None and run.particles is None
    info = cli("info", cut).stdout
    assert "continues it from pde: its start, t = 0 (no snapshot of it was written); particles: its start" in info, info
    r = cli("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "[pde] the archive holds no snapshot of this stage: it starts from t = 0" in r.stderr, r.stderr
    assert cli("run", cfg, "--out", full, "--quiet").returncode == 0
    done, ref = load(cut), load(full)
    assert done.status == "finished"
    assert np.array_equal(done.pde.coeffs, ref.pde.coeffs) and np.array_equal(done.particles.x, ref.particles.x)


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_archive_names_its_libraries_and_a_resume_with_others_says_so(tmp_path):
    """The archive records the versions of the libraries whose kernels make a run's round-off (as the
    installed distributions report them) and attnpde's own; a resume under other versions continues, says
    that its part agrees with the uninterrupted run to round-off only, and records what it ran with."""
    from importlib.metadata import version

    import solvers
    cfg = write(tmp_path, LONG_PDE_CFG)
    out = tmp_path / "a.h5"
    assert _run_until_signalled(cfg, out, signal.SIGINT).returncode == 130
    with h5py.File(out, "r+") as f:
        here = str(f.attrs["libraries"])
        for dist in ("numpy", "scipy", "pyFFTW", "shtns", "finufft", "ducc0", "h5py"):
            assert f"{dist.lower()} {version(dist)}" in here, (dist, here)
        f.attrs["libraries"] = here.replace(f"numpy {version('numpy')}", "numpy 1.0.0")
        # and started by another version of attnpde (whose own numerical choices may round differently)
        mine = str(f.attrs["software_version"])
        assert mine == solvers.__version__
        f.attrs["software_version"] = "0.0.1"
    r = cli("run", cfg, "--out", out, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "[resume] the run was started with: numpy 1.0.0" in r.stderr and "round-off" in r.stderr
    assert f"started by attnpde 0.0.1 and continues with attnpde {mine}" in r.stderr
    with h5py.File(out) as f:
        assert str(f.attrs["libraries_resumed"]) == here and f.attrs["status"] == "finished"
        assert str(f.attrs["software_resumed"]) == mine
    info = cli("info", out)
    assert "libraries: numpy 1.0.0" in info.stdout and f"resumed with: {here}" in info.stdout
    assert f"resumed by attnpde {mine}" in info.stdout


@pytest.mark.slow
def test_resume_refuses_other_configuration_and_bad_files(tmp_path):
    cfg = write(tmp_path, LONG_PDE_CFG)
    out = tmp_path / "a.h5"
    assert _run_until_signalled(cfg, out, signal.SIGINT).returncode == 130
    other = write(tmp_path, LONG_PDE_CFG.replace("beta = 1.0", "beta = 2.0"),
                  "other.toml")
    r = cli("run", other, "--out", out, "--resume")
    assert r.returncode == 2 and "different configuration" in r.stderr and "model.beta" in r.stderr
    assert "model.beta: 1.0 in the archive, 2.0 in the configuration" in r.stderr, r.stderr
    # how often the archive is written may change on resume (it changes no number); the run's name may not
    named = write(tmp_path, LONG_PDE_CFG.replace('name = "t"', 'name = "u"\ncheckpoint_interval = 10.0'), "named.toml")
    r = cli("run", named, "--out", out, "--resume")
    assert r.returncode == 2 and "run.name" in r.stderr and "checkpoint_interval" not in r.stderr, r.stderr
    often = write(tmp_path, LONG_PDE_CFG.replace('name = "t"', 'name = "t"\ncheckpoint_interval = 10.0\n'
                                                 'flush_interval = 0.5'), "often.toml")
    r = cli("run", often, "--out", out, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "[resume] run.checkpoint_interval: absent in the archive, 10.0 in the configuration" in r.stderr
    done = load(out)
    assert done.status == "finished" and "run.flush_interval" in done.attrs["resumed_with"]
    assert "resumed with other archive settings: resume 1: run.checkpoint_interval" in cli("info", out).stdout
    assert cli("run", cfg, "--out", tmp_path / "ref.h5", "--quiet").returncode == 0
    assert np.array_equal(done.pde.coeffs, load(tmp_path / "ref.h5").pde.coeffs)
    # a configuration without a [run] table: the resume may add one with these settings alone
    bare = write(tmp_path, LONG_PDE_CFG.replace('[run]\nname = "t"\n', ""), "bare.toml")
    cut = tmp_path / "b.h5"
    assert _run_until_signalled(bare, cut, signal.SIGINT).returncode == 130
    later = write(tmp_path, "[run]\ncheckpoint_interval = 10.0\n" + bare.read_text(), "later.toml")
    r = cli("run", later, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert load(cut).attrs["resumed_with"] == ("resume 1: run.checkpoint_interval: absent in the archive, "
                                               "10.0 in the configuration")
    # foreign and damaged files
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = 1
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(out.read_bytes()[:2000])
    for bad, what in ((foreign, "not an attnpde archive"), (text, "not a readable HDF5 file"),
                      (damaged, "not a readable HDF5 file"), (tmp_path / "missing.h5", "no such file")):
        for args in (("info", bad), ("plot", bad), ("run", cfg, "--out", bad, "--resume")):
            r = cli(*args)
            expected = "no archive to resume" if bad.name == "missing.h5" and args[0] == "run" else what
            assert r.returncode == 2 and expected in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        with pytest.raises(ArchiveError):
            load(bad)


@pytest.mark.slow
def test_run_resume_and_info_tell_a_run_from_a_sweep_member_and_a_validate_study(tmp_path):
    """An unfinished archive says which command wrote it (its ``command`` attribute). `attnpde info` gives the
    resume that applies, and `run --resume` refuses a validate study (it does not resume; resumed as a run it
    became a plain run archive without its study) and a sweep's member (its sweep resumes it), leaving the
    file as it was."""
    cfg = write(tmp_path, LONG_PDE_CFG)
    out = tmp_path / "a.h5"
    assert _run_until_signalled(cfg, out, signal.SIGINT).returncode == 130
    r = cli("info", out)
    # the archive's own command, made a resume
    assert r.returncode == 0 and f"`attnpde run {cfg} --quiet --out {out} --resume` continues it" in r.stdout, r.stdout
    for command, advice, refusal in (
            ("attnpde validate c.toml --n 10,100", "`attnpde validate` does not resume", "which does not resume"),
            ("attnpde sweep (member beta = 1)", "the sweep's own command with --resume",
             "resume it with the sweep's own command")):
        other = tmp_path / f"{command.split()[1]}.h5.part"
        other.write_bytes(out.read_bytes())
        with h5py.File(other, "r+") as f:
            f.attrs["command"] = command
        before = other.read_bytes()
        r = cli("info", other)
        assert r.returncode == 0 and advice in r.stdout and "attnpde run CONFIG" not in r.stdout, r.stdout
        r = cli("run", cfg, "--out", other, "--resume")
        assert r.returncode == 2 and refusal in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert other.read_bytes() == before
    # a run started with --force (or a prefix argparse takes for it) resumes without it, at the path info was
    # given (the archive moved); an archive without its command gets a placeholder
    for command, hint in (("attnpde run 'my c.toml' --forc --out old/b.h5",
                           f"`attnpde run 'my c.toml' --out {tmp_path / 'b.h5'} --resume`"),
                          ("", f"`attnpde run CONFIG --out {tmp_path / 'b.h5'} --resume`")):
        other = tmp_path / "b.h5"
        other.write_bytes(out.read_bytes())
        with h5py.File(other, "r+") as f:
            f.attrs["command"] = command
        assert hint in cli("info", other).stdout


def test_a_ctrl_c_swallowed_before_the_run_still_stops_it(tmp_path, monkeypatch):
    """A Ctrl-C whose KeyboardInterrupt a library swallows (raised in a compiled module's initialisation, as
    the ImportError of an optional import) was lost: the run went to its end and the command exited 0 (a
    fresh clone under load, test_ctrl_c_while_the_command_starts_ends_it_in_one_line). The command's
    handler has recorded it: the run stops after its first step, resumable, and the command exits 130."""
    from solvers.app import cli, runner

    real = runner.run_config

    def swallowing(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)                       # the handler runs here, and its KeyboardInterrupt is caught
        except KeyboardInterrupt:
            pass
        return real(*a, **k)

    monkeypatch.setattr(runner, "run_config", swallowing)
    cfg = write(tmp_path, LONG_PDE_CFG)
    out = tmp_path / "m.h5"
    assert cli.main(["run", str(cfg), "--out", str(out), "--quiet"]) == 130
    run = load(out)
    assert run.status == "interrupted" and run.pde.stop_reason == "interrupted" and run.pde.nsteps <= 2


def test_the_archive_records_the_arguments_given_to_main(tmp_path):
    """``cli.main(argv)`` called from a script records its own ``argv`` as the command (which
    ``archive.made_by`` reads), not the calling process's (it recorded "attnpde " and the script's)."""
    from solvers.app.cli import main

    cfg = write(tmp_path, PDE_CFG.format(t_final=0.1, save_every=0.05, max_degree=64))
    out = tmp_path / "m.h5"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    with h5py.File(out) as f:
        assert f.attrs["command"] == f"attnpde run {cfg} --out {out} --quiet", f.attrs["command"]


@pytest.mark.slow
def test_sweep_writes_one_archive_per_beta(tmp_path):
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.5, save_every=0.25, max_degree=256), "sw.toml")
    r = cli("sweep", cfg, "--beta", "0.5,2", "--workers", "2", "--out", tmp_path / "sw")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "sw").glob("*.h5")) == ["t_beta0.5.h5", "t_beta2.h5"]
    assert load(tmp_path / "sw" / "t_beta2.h5").model.beta == 2.0
    assert (tmp_path / "sw" / "clusters_vs_sqrt_beta.png").exists()
    assert "sqrt(beta)" in r.stdout
    bad = cli("sweep", cfg, "--beta", "1,x")
    assert bad.returncode == 2 and "'x' is not a number" in bad.stderr


def test_the_sweep_figure_has_integer_count_ticks(tmp_path):
    """`attnpde sweep` draws counts against sqrt(beta) with integer ticks only."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.ticker import MaxNLocator

    from solvers.app import figure_check, sweep

    with figure_check.captured() as figs:
        sweep.plot_sweep(tmp_path, [{"beta": 1.0, "clusters": 2, "pde_atoms": 2},
                                    {"beta": 4.0, "clusters": 3, "pde_atoms": 3}], "t")
    loc = figs[sweep.FIGURE].axes[0].yaxis.get_major_locator()
    assert isinstance(loc, MaxNLocator) and all(float(v).is_integer() for v in loc.tick_values(1.7, 3.2))


@pytest.mark.parametrize("command, flag", [("sweep", "--beta"), ("validate", "--n")])
def test_a_list_that_starts_with_a_minus_sign_reaches_the_check_of_its_values(tmp_path, capsys, command, flag):
    # argparse alone takes "-1,2" for an option and answers "expected one argument"
    from solvers.app.cli import main
    cfg = write(tmp_path, PDE_CFG.format(t_final=0.5, save_every=0.25, max_degree=256), "neg.toml")
    assert main([command, str(cfg), flag, "-1,2", "--out", str(tmp_path / "out")]) == 2
    assert f"{flag}: values must be finite and >= 0, got '-1'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- particles in the archive ------------------------------------------------------------------------------
PARTICLE_CFG = """
[run]
name = "p"
[model]
d = 2
beta = 4.0
flow = "ascent"
noise = {noise}
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[particles]
n = {n}
seed = 7
integrator = "rk4"
dt = 0.01
t_final = {t_final}
save_every = 0.1
"""


BAD_PARTICLE_CONFIGS = [
    (BASE + "[particles]\nn = 10\nt_final = 1.0\n[particles.stop]\nwindows = 3\n", "particles.stop.windows",
     "unknown key"),
    (BASE + "[particles]\nn = 0\nt_final = 1.0\n", "particles.n", ">= 1"),
    (BASE + '[particles]\nn = 10\nt_final = 1.0\nintegrator = "leapfrog"\n', "particles.integrator", "'euler'"),
    (BASE + "noise = 0.1\n" + '[particles]\nn = 10\nt_final = 1.0\nintegrator = "adaptive"\n',
     "particles.integrator", "noise"),
    ('[model]\nd = 4\nbeta = 1.0\nflow = "ascent"\n[particles]\nn = 10\nt_final = 1.0\ninit = "quadrature"\n',
     "particles.init", "S^1 and S^2 only"),
    (BASE + '[initial]\nkind = "von_mises"\nmu = [1.0, 0.0]\nkappa = 2.0\n'
     '[particles]\nn = 10\nt_final = 1.0\ninit = "quasi-uniform"\n', "particles.init", "uniform density only"),
    (BASE + "[particles]\nn = 10\nt_final = 1.0\nsave_every = 2.0\n", "particles.save_every", "<= particles.t_final"),
]


@pytest.mark.parametrize("text, path, what", BAD_PARTICLE_CONFIGS)
def test_bad_particle_configuration_is_refused(text, path, what):
    test_bad_configuration_is_refused(text, path, what)


@pytest.mark.slow
@pytest.mark.parametrize("text, path, what", BAD_PARTICLE_CONFIGS)
def test_bad_particle_configuration_is_refused_by_the_command(tmp_path, text, path, what):
    test_bad_configuration_is_refused_by_the_command(tmp_path, text, path, what)


@pytest.mark.slow
def test_particle_round_trip_with_comparison_and_plots(tmp_path):
    from solvers import simulate_particles
    text = PDE_CFG.format(t_final=1.0, save_every=0.25, max_degree=512) + (
        '[particles]\nn = 400\ninit = "quadrature"\nintegrator = "rk4"\ndt = 0.05\nt_final = 1.0\nsave_every = 0.25\n'
        "[particles.stop]\nwindow = 3\n[compare]\nmoments = 4\n")
    cfg = write(tmp_path, text)
    r = cli("run", cfg, "--quiet")
    assert r.returncode == 0, r.stderr
    run = load(cfg.with_suffix(".h5"))
    model = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    ref = simulate_particles(model, 400, t_final=1.0, init="quadrature", integrator="rk4", dt=0.05, save_every=0.25,
                             stop={"window": 3})
    p = run.particles
    assert p.stop_reason == ref.stop_reason and p.nsteps == ref.nsteps and p.sum_method == ref.sum_method
    assert np.array_equal(p.t, ref.t) and np.array_equal(p.x, ref.x) and np.array_equal(p.w, ref.w)
    for k in ("energy", "max_drift", "dissipation", "cluster_count"):
        assert np.array_equal(getattr(p, k), getattr(ref, k)), k
    assert p.stop == ref.stop and p.integrator == "rk4" and p.dt == 0.05 and p.options == ref.options
    c_run, c_ref = p.clusters(-1, 0.5), ref.clusters(-1, 0.5)
    assert np.array_equal(c_run[1], c_ref[1]) and np.allclose(run.atoms["particles"][1], c_ref[1])
    # quadrature particles of a smooth (uniform) start follow the PDE: the archived comparison says so
    assert run.comparison is not None and run.comparison.w1.shape == run.comparison.t.shape
    assert run.comparison.w1[0] < 1e-2 and np.all(np.isfinite(run.comparison.mmd))
    with h5py.File(cfg.with_suffix(".h5")) as f:
        assert f["particles/x"].dims[0][0] == f["particles/t"] and f["particles/x"].shape == (5, 400, 2)
        assert f["particles/n_clusters"].dims[0][0] == f["particles/t"]
    info = cli("info", cfg.with_suffix(".h5"))
    assert info.returncode == 0 and "particles:" in info.stdout and "comparison (PDE vs particles)" in info.stdout
    plot = cli("plot", cfg.with_suffix(".h5"), "--out", tmp_path / "png")
    assert plot.returncode == 0, plot.stderr
    assert {"spacetime.png", "final.png", "energy.png"} <= {p.name for p in (tmp_path / "png").glob("*.png")}


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_particle_run_resumes_to_the_same_numbers(tmp_path, sig):
    # noise > 0: the resumed run must also continue the random stream where the killed one stood
    cfg = write(tmp_path, PARTICLE_CFG.format(noise=0.01, n=4000, t_final=8.0))
    full, cut, _ = _full_and_cut(tmp_path, cfg, sig)
    run = load(cut)
    ref = load(full).particles
    n_cut = len(run.particles.t)
    assert 2 <= n_cut < len(ref.t), "the run was not cut in the middle"
    assert run.particles.stop_reason == ("interrupted" if sig == signal.SIGINT else "killed")
    assert np.array_equal(run.particles.x, ref.x[:n_cut])
    r = cli("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    done = load(cut).particles
    assert done.stop_reason == "t_final" and done.nsteps == ref.nsteps
    assert np.array_equal(done.t, ref.t)
    assert np.abs(done.x - ref.x).max() <= 1e-12
    assert np.abs(done.energy - ref.energy).max() <= 1e-12
    assert np.array_equal(done.cluster_count, ref.cluster_count)


STIFF_CFG = """
[model]
d = 2
beta = 1.0
flow = "ascent"
strength = 25.0
[particles]
n = 300
seed = 4
integrator = "euler"
dt = 0.1
t_final = 8.0
save_every = 1.0
"""


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_a_resumed_archive_from_before_the_step_stiffness_keeps_its_series_aligned(tmp_path):
    """Euler at h gamma = 2.5 > 2 (beyond its stability bound from the first steps). A run cut after 3
    snapshots, made to look like an archive written before the step stiffness was recorded (no
    /particles/step_stiffness, no accumulators in its restart state), then resumed: the series has a row per
    snapshot (NaN for the rows written before), and the first step beyond the bound that the resumed run
    reports is one it measured, the same in the archive, info and the message (the uninterrupted run's first
    one, at t = 1.6, came before the cut)."""
    cfg = write(tmp_path, STIFF_CFG)
    full, cut, proc = _full_and_cut(tmp_path, cfg, signal.SIGINT)
    ref = load(full).particles
    assert ref.beyond_stability is not None and ref.beyond_stability < 2.0        # before the cut
    assert f"first at t = {ref.beyond_stability:.6g}" in ref.message
    with h5py.File(cut, "r+") as f:
        g = f["particles"]
        del g["step_stiffness"]
        r = g["restart"]
        state = json.loads(r.attrs["state"])
        state.pop("stiffness")
        # nor the checksums, which came later still (a state edited under them is refused as damaged)
        for k in ("checksums", "text_crc32"):
            del f.attrs[k]
        state.pop("digest")
        state.pop("crc")
        r.attrs["state"] = json.dumps(state)
        rows = g["t"].shape[0]
    assert rows >= 2
    assert cli("run", cfg, "--out", cut, "--resume", "--quiet").returncode == 0
    done = load(cut).particles
    assert np.array_equal(done.t, ref.t) and done.step_stiffness.shape == done.t.shape
    assert np.all(np.isnan(done.step_stiffness[:rows]))
    # the first resumed row misses the steps the cut run made after its last snapshot (the older restart
    # state kept no accumulators): a maximum over fewer steps of the same interval; the rows after it are equal
    assert done.step_stiffness[rows] <= ref.step_stiffness[rows]
    assert np.array_equal(done.step_stiffness[rows + 1:], ref.step_stiffness[rows + 1:], equal_nan=True)
    assert done.t[rows - 1] < done.beyond_stability and f"first at t = {done.beyond_stability:.6g}" in done.message
    assert f"BEYOND it from the step to t = {done.beyond_stability:.6g}" in cli("info", cut).stdout


CONTINUATION_CFG = """
[model]
d = 2
beta = 6.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 256
t_final = 6.0
save_every = 0.5
"""


@pytest.mark.cpu_dependent
@pytest.mark.slow
@pytest.mark.parametrize("sig, after", [(signal.SIGKILL, 3), (signal.SIGINT, 3), (signal.SIGKILL, 13)])
def test_continuation_resumes_to_the_same_numbers(tmp_path, sig, after):
    """A run past its handoff (the Lagrangian continuation, default options) cut after its third snapshot,
    or after its last one (before the error-estimate run), then resumed: the same snapshots, node
    measures, merges, end and atoms (with their error estimate) as the uninterrupted run, bit for bit."""
    cfg = write(tmp_path, CONTINUATION_CFG)
    full, cut, proc = _full_and_cut(tmp_path, cfg, sig, after)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), proc.stderr
    part = load(cut).pde
    assert part.lagrangian is not None and len(part.t) == after         # cut past the handoff
    assert part.stop_reason == ("interrupted" if sig == signal.SIGINT else "killed")
    r = cli("run", cfg, "--out", cut, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    done, ref = load(cut), load(full)
    a, b = done.pde, ref.pde
    assert a.stop_reason == b.stop_reason == "t_final" and np.array_equal(a.t, b.t)
    assert np.array_equal(a.coeffs, b.coeffs) and np.array_equal(a.density, b.density)
    for na, nb in zip(a.nodes, b.nodes):
        assert (na is None) == (nb is None)
        if na is not None:
            assert all(np.array_equal(na[k], nb[k]) for k in ("x", "w", "count"))
    assert np.array_equal(a.lagrangian.merges, b.lagrangian.merges)
    assert a.lagrangian.handoff == b.lagrangian.handoff
    for u, v in zip(done.atoms["pde"], ref.atoms["pde"]):                   # positions, masses
        assert np.array_equal(u, v)
    for key in ("pde:mass_errors", "pde:counts"):
        assert np.array_equal(done.atoms[key], ref.atoms[key]), key
    assert done.atoms["pde:attrs"]["diffuse"] == ref.atoms["pde:attrs"]["diffuse"]


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_an_interrupt_in_the_error_estimate_rerun_keeps_the_atoms_without_error_bars(tmp_path):
    """Ctrl-C in the error-estimate rerun: the solution had reached t_final, so the archive keeps its atoms
    (those of the uninterrupted run, bit for bit) without error bars, and info says why they are missing;
    a resume runs the rerun again and adds them."""
    from solvers.app.info import describe
    from solvers.app.runner import run_config

    config = parse_config(CONTINUATION_CFG)
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    run_config(config, full, log=lambda s: None, progress=False)

    def log(line):
        if "error estimate:" in line:        # said at the first step of the rerun
            raise KeyboardInterrupt
    assert run_config(config, cut, log=log, progress=False).status == "interrupted"
    part, ref = load(cut), load(full)
    assert part.pde.stop_reason == "interrupted" and part.pde.t[-1] == 6.0
    for u, v in zip(part.atoms["pde"], ref.atoms["pde"]):                   # positions, masses
        assert np.array_equal(u, v)
    assert len(ref.atoms["pde"][1]) >= 1 and "pde:mass_errors" in ref.atoms
    assert "pde:mass_errors" not in part.atoms
    assert part.atoms["pde:attrs"]["error_estimate"] == "interrupted"
    assert "no error estimate yet (its rerun was interrupted: a resume runs it)" in describe(cut)
    assert run_config(config, cut, resume=True, log=lambda s: None, progress=False).status == "finished"
    done = load(cut)
    assert np.array_equal(done.atoms["pde:mass_errors"], ref.atoms["pde:mass_errors"])
    assert "error_estimate" not in done.atoms["pde:attrs"]


def test_progress_lines_time_the_error_estimate_rerun_as_its_own_phase():
    """A run resumed at t = 10 has only the error-estimate rerun left, which starts again at the handoff
    (t = 0.02): its lines estimate the time left from that phase's own steps (no "eta nans")."""
    import io

    from solvers.app.runner import Progress
    s = io.StringIO()
    p = Progress("pde", 10.0, 10.0, stream=s, every=0.0)
    for t in (0.02, 1.0, 5.0):
        p({"t": t, "check": "2x nodes"})
    said, *lines = s.getvalue().splitlines()
    assert said == "[pde] error estimate: the continuation again from its handoff, with 2x nodes, to t = 10"
    assert len(lines) == 3 and "nan" not in s.getvalue() and lines[0].endswith("eta ?")
    assert all(float(line.rsplit("eta ", 1)[1].rstrip("s")) >= 0 for line in lines[1:])


def test_progress_lines_of_a_rerun_that_ends_before_t_final_reach_100_percent():
    """A run that stopped stationary at t = 4 (t_final 10): its error-estimate rerun goes from the handoff
    to t = 4, which its lines show as the end (the last at 100%), not t_final."""
    import io

    from solvers.app.runner import Progress
    s = io.StringIO()
    p = Progress("pde", 10.0, stream=s, every=1e9)
    for t in (0.02, 1.0, 4.0):
        p({"t": t, "check": "2x nodes", "t_end": 4.0})
    said, *lines = s.getvalue().splitlines()
    assert said.endswith("to t = 4")
    # the first call prints (nothing printed yet), the middle one is not due, the end of the phase prints
    assert len(lines) == 2 and lines[-1].startswith("[pde] t=4/4 (100.0%)"), lines


def test_comparison_figure_leaves_out_undefined_and_zero_distances(tmp_path, monkeypatch):
    """On the log axis of distances, a zero (the CDF drift at t = 0) or nan (the CDF drift past the PDE's
    handoff) is no data point: it is neither clamped to a tiny floor, which stretched the axis over 14
    empty decades, nor silently dropped: the figure says why the CDF drift is missing."""
    from solvers.app import plots
    from solvers.comparison import Comparison
    t = np.array([0.0, 1.0, 2.0])
    cmp = Comparison(t=t, w1=np.array([1e-2, 2e-3, 1e-3]), mmd=np.array([5e-3, 1e-3, 8e-4]),
                     moment_gap=np.array([1e-2, 4e-3, 2e-3]), energy_gap=np.array([0.0, 1e-3, 2e-3]),
                     cdf_drift=np.array([0.0, np.nan, np.nan]), matched_atoms=[], unmatched_pde=[],
                     unmatched_particles=[], kernel="exp", moments_degree=8)
    from solvers.app import figure_check
    with figure_check.captured() as got:
        plots.plot_comparison(cmp, tmp_path / "c.png")
    ax = got["c.png"].axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["W1", "MMD", "moment gap", "energy gap"]
    ys = np.concatenate([line.get_ydata() for line in ax.get_lines()])
    assert np.nanmin(ys) == 8e-4                          # the smallest distance, no floor value
    # said in the legend, beside the distances drawn
    assert any("CDF drift: undefined past the PDE's handoff" in txt.get_text() for txt in ax.get_legend().get_texts())


def test_sphere_maps_say_when_the_particles_are_drawn_at_another_time(tmp_path, monkeypatch):
    """The S^2 maps draw the particles' nearest snapshot beside each PDE snapshot: where its time differs
    (other save_every), the panel's title gives it; the figure's legend names only the layers drawn."""
    from solvers.app import figure_check, plots_sphere
    from solvers.app.runner import run_config

    text = ('[model]\nd = 3\nbeta = 1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.5\n'
            "[particles]\nn = 50\nt_final = 1.0\nsave_every = 0.3\n")
    run_config(parse_config(text), tmp_path / "a.h5", log=lambda s: None, progress=False)
    figs = []
    with figure_check.captured() as got:
        plots_sphere.sphere_figures(load(tmp_path / "a.h5"), tmp_path)
    figs.append(got["maps.png"])
    titles = [ax.get_title() for ax in figs[0].axes if ax.get_title()]
    # PDE snapshots 0, 0.5, 1; particle snapshots 0, 0.3, 0.6, 0.9, 1: at 0.5 the nearest is 0.6
    assert titles == ["t = 0", "t = 0.5, particles at t = 0.6", "t = 1"], titles
    legend = [t.get_text() for t in figs[0].legends[0].get_texts()]
    # the PDE's atoms are named only where there are some (one second of beta = 1 forms none)
    formed = len(load(tmp_path / "a.h5").atoms["pde"][1])
    pde_atoms = ["PDE atoms (basins of the density): mass right"] if formed else []
    # the particles' clusters at their end (t = 1), every one, by the rule they were counted with
    assert legend == ["particles"] + pde_atoms + ["particle clusters at t = 1 (single linkage): mass left"], legend
    assert "Mollweide maps: PDE density" in figs[0]._suptitle.get_text()
    # the particles alone: no PDE layer named
    text = '[model]\nd = 3\nbeta = 1.0\nflow = "ascent"\n[particles]\nn = 50\nt_final = 1.0\nsave_every = 0.5\n'
    run_config(parse_config(text), tmp_path / "b.h5", log=lambda s: None, progress=False)
    with figure_check.captured() as got:
        plots_sphere.sphere_figures(load(tmp_path / "b.h5"), tmp_path)
    figs.append(got["maps.png"])
    legend = [t.get_text() for t in figs[1].legends[0].get_texts()]
    assert legend == ["particles", "particle clusters at t = 1 (single linkage): mass left"], legend
    assert figs[1]._suptitle.get_text().endswith("\nMollweide maps: particles")
    import matplotlib.pyplot as plt
    for fig in figs:                     # _save would have closed them: no Mollweide axes left current
        plt.close(fig)


def test_info_says_where_the_energy_is_no_lyapunov_function():
    """E decreases (descent) along a Wasserstein gradient flow of E only: info says so for SA, a
    general-form perceptron and noise (free energy E - nu * entropy), and nothing for USA + gradient form."""
    from solvers.app.info import _energy_note
    relu = Perceptron.random(2, 2, "relu", 1.0, seed=1)
    general = Perceptron.random(2, 2, "relu", 1.0, seed=1, general=True)
    assert _energy_note(Model(2, 1.0, "descent", perceptron=relu)) == ""
    assert "SA" in _energy_note(Model(2, 1.0, "descent", attention="normalized"))
    assert "general-form" in _energy_note(Model(2, 1.0, "descent", perceptron=general))
    assert "entropy" in _energy_note(Model(2, 1.0, "descent", noise=0.1))


def test_info_of_a_certified_end_says_where_all_the_mass_is():
    """The issue's sphere end (beta = 9): 3 certified atoms, one of 0.0005 below DUST. info counts them as it
    lists them (2 atoms + 1 dust atom = 3), and the masses it prints (atoms, dust, diffuse) add to 1."""
    from types import SimpleNamespace

    from solvers.app.info import _terminal_lines
    from solvers.lagrangian import DUST
    masses = np.array([0.5616, 0.4379, 0.0005])
    T = SimpleNamespace(t=22060.0, verdict="stable", growth=-6.7e-4, max_speed=7.7e-15, neutral=0,
                        positions=np.eye(3), masses=masses, mass_errors=np.array([1.2e-3, 1.0e-3, 2.0e-4]),
                        counts=np.array([4815, 3374, 3]))
    lines = _terminal_lines(T, {"kind": "node groups", "radius": 0.0039, "check_nodes": 16928})
    assert "3 atoms: total mass 0.9995 in 2 atom(s) + 0.0005 in 1 dust atom(s)" in lines[1]
    assert lines[1].endswith("; diffuse 0.0000")
    listed = [ln for ln in lines if "atom mass" in ln]
    assert len(listed) == 3 and listed[2].lstrip().startswith("dust atom mass 0.0005 ± 2.0e-04")
    parts = re.findall(r"(\d\.\d{4}) in|diffuse (\d\.\d{4})", lines[1])
    assert sum(float(a or b) for a, b in parts) == pytest.approx(1.0, abs=1e-4)
    assert masses[2] < DUST <= masses[1]
    # without dust: one total, no dust named
    T.masses, T.mass_errors, T.counts = masses[:2] / masses[:2].sum(), None, T.counts[:2]
    lines = _terminal_lines(T, {})
    assert lines[1] == "  total mass 1.0000 in 2 atom(s); diffuse 0.0000" and "dust" not in " ".join(lines)


def test_a_run_started_with_ctrl_c_ignored_says_so_once_and_names_kill(tmp_path, capsys):
    """A shell's `&` starts a command with SIGINT ignored: Ctrl-C cannot reach it. `attnpde run` says so once
    and names what stops it cleanly; started normally it says nothing of the kind."""
    import signal

    from solvers.app.cli import main
    cfg = write(tmp_path, '[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 0.01\n')
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert main(["run", str(cfg), "--out", str(tmp_path / "a.h5"), "--quiet"]) == 0
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert err.count("Ctrl-C (SIGINT) ignored") == 1 and f"`kill {os.getpid()}` (SIGTERM) stops it cleanly" in err
    assert main(["run", str(cfg), "--out", str(tmp_path / "b.h5"), "--quiet"]) == 0
    assert "ignored" not in capsys.readouterr().err
