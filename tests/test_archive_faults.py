"""Nothing lost, nothing silently wrong: archives that are locked, out of room, edited or damaged are refused
in one line (or, out of room, kept as their last commit left them, resumable), and an archive says in its
own words what it holds (resolved options, placeholder dimensions, the ragged node measure). The fault
campaign (scripts/archive_faults.py) runs a small sample in the slow lane."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from solvers.app import archive_writer
from solvers.app.archive import ArchiveDamaged, ArchiveError, ArchiveFull, ArchiveInUse, ArchiveWriter, load
from solvers.app.config import parse_config
from solvers.app.runner import RunRefused, check_resumable, run_config

ROOT = Path(__file__).resolve().parents[1]

# past its handoff (t ~ 0.01) in the continuation's nodes, then particles; every snapshot its own batch
CFG = """
[run]
flush_interval = 0
[model]
d = 2
beta = 6.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 64
t_final = 1.0
save_every = 0.25
nodes = 256
[particles]
n = 100
seed = 3
dt = 0.05
t_final = 1.0
save_every = 0.25
"""


def cli(*args, cwd=ROOT, timeout=300, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solvers.app.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def one_error_line(r) -> str:
    """The command's one line of error (and no traceback)."""
    lines = [line for line in r.stderr.splitlines() if line.startswith("attnpde: error:")]
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    return lines[0]


def cut(path: Path, text: str, stage: str, commits: int, monkeypatch) -> None:
    """Run ``text`` into ``path`` and stop it (as a kill would, after a commit) once ``stage`` has committed
    ``commits`` batches: the archive holds what a run killed there leaves."""
    seen = []
    commit = archive_writer.ArchiveWriter._commit

    def counting(self, section, restart):
        commit(self, section, restart)
        if section == stage and not self._hold:
            seen.append(section)
            if len(seen) == commits:
                raise KeyboardInterrupt
    monkeypatch.setattr(archive_writer.ArchiveWriter, "_commit", counting)
    try:
        assert run_config(parse_config(text), path, progress=False, log=lambda s: None).status == "interrupted"
    finally:
        monkeypatch.setattr(archive_writer.ArchiveWriter, "_commit", commit)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run of CFG, and copies of it cut in the continuation and in the particles."""
    d = tmp_path_factory.mktemp("faults")
    run_config(parse_config(CFG), d / "full.h5", progress=False, log=lambda s: None)
    mp = pytest.MonkeyPatch()
    try:
        cut(d / "cut_pde.h5", CFG, "pde", 3, mp)
        cut(d / "cut_particles.h5", CFG, "particles", 2, mp)
    finally:
        mp.undo()
    return d


def copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def same_run(a: Path, b: Path) -> None:
    x, y = load(a), load(b)
    for k in ("t", "coeffs", "density", "energy"):
        assert np.array_equal(getattr(x.pde, k), getattr(y.pde, k)), k
    for k in ("t", "dt", "error", "accepted"):
        assert np.array_equal(x.pde.steps[k], y.pde.steps[k]), k
    for u, v in zip(x.pde.nodes, y.pde.nodes):
        assert (u is None) == (v is None) and (u is None or np.array_equal(u["x"], v["x"]))
    assert np.array_equal(x.particles.x, y.particles.x) and x.pde.nsteps == y.pde.nsteps
    assert np.array_equal(x.atoms["pde"][1], y.atoms["pde"][1])


# --- the writer: every snapshot a committed batch; a failed write ----------------------------------------
def test_flush_interval_0_commits_every_snapshot_and_the_archive_is_the_run(tmp_path, monkeypatch):
    """flush_interval = 0: every snapshot is a batch committed with its restart state; the archive holds
    exactly what solve_pde returns in memory, every restart state included. (It replaces the test of the
    background thread that wrote batches behind the run, which is gone.)"""
    from solvers import Model, Perceptron, solve_pde
    commits, commit = [], archive_writer.ArchiveWriter._commit
    monkeypatch.setattr(archive_writer.ArchiveWriter, "_commit",
                        lambda self, s, r: (commits.append((s, self._hold)), commit(self, s, r))[1])
    text = ('[run]\nflush_interval = 0\n[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[model.perceptron]\nunits = 2\n'
            'activation = "relu"\nseed = 111\n[pde]\ndegree = 64\nt_final = 1.0\nsave_every = 0.05\nmax_degree = 512\n'
            'tail_max = 1e-2\n')
    out = tmp_path / "every.h5"
    assert run_config(parse_config(text), out, log=lambda s: None, progress=False).status == "finished"
    model = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    ref = solve_pde(model, 1.0, 64, save_every=0.05, max_degree=512, tail_max=1e-2)
    pde = load(out).pde
    assert len(ref.t) == 21 and sum(not held for _, held in commits) >= 21
    assert np.array_equal(pde.t, ref.t) and np.array_equal(pde.coeffs, ref.coeffs)
    assert np.array_equal(pde.density, ref.density) and np.array_equal(pde.steps["dt"], ref.steps["dt"])
    with h5py.File(out) as f:
        state = json.loads(f["pde/restart"].attrs["state"])
        assert state["snapshots"] == 21 and state["t"] == ref.t[-1] and state["slot"] == "a"
        assert list(f["pde/restart"]) == ["a"]


def test_a_failed_write_leaves_the_archive_as_its_last_commit(tmp_path):
    """A write that fails (here: a full disk) raises ArchiveFull; the file is left as its last flush wrote it
    (nothing more of that HDF5 session reaches it), readable, and its status can still be recorded."""
    from solvers import Model

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    w = ArchiveWriter(tmp_path / "e.h5", "create", model=Model(2, 1.0, "ascent"), flush_interval=0.0)
    w.pde_begin(np.zeros((8, 2)), {}, "uniform")
    w._write_pde = full
    with pytest.raises(ArchiveFull, match="no space left on"):
        w.pde_snapshot({"t": 0.0})
    with pytest.raises(ArchiveError, match="abandoned after a failed write"):
        w.pde_snapshot({"t": 0.1})
    assert w.set_status("failed")
    w.close()
    with h5py.File(tmp_path / "e.h5") as f:
        assert f.attrs["status"] == "failed" and "pde" in f and "t" not in f["pde"]
    assert load(tmp_path / "e.h5").status == "failed"


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_out_of_room_is_an_ordinary_failure_and_the_run_resumes(tmp_path, runs):
    """The file size limit (RLIMIT_FSIZE, the portable stand-in for a full disk) met halfway: exit 1, one
    line naming the limit and the size needed and where the archive stands; the archive readable, status
    failed; --resume without the limit ends at the uninterrupted run's numbers."""
    import resource

    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG)
    out = tmp_path / "s.h5"
    limit = (runs / "full.h5").stat().st_size * 4 // 5
    r = cli("run", cfg, "--out", out, "--quiet", preexec_fn=lambda: resource.setrlimit(
        resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY)))
    line = one_error_line(r)
    assert r.returncode == 1 and "the file size limit" in line and "needs to grow to" in line, line
    assert "(status failed); make room, then continue with --resume" in line, line
    assert load(out).status == "failed"
    r = cli("run", cfg, "--out", out, "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    same_run(out, runs / "full.h5")


# --- locks -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_refused_force_leaves_an_archive_a_reader_holds_byte_identical(tmp_path, runs):
    """A program reading the archive (h5py, with HDF5's own lock) while `run --force` targets it: refused,
    in use by another process, and the file is byte for byte as it was (HDF5 used to empty it)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG)
    held = copy(runs / "full.h5", tmp_path / "held.h5")
    before = held.read_bytes()
    reader = subprocess.Popen([sys.executable, "-c", f"import h5py, time\nf = h5py.File({str(held)!r}, 'r')\n"
                               "print('open', flush=True)\ntime.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        r = cli("run", cfg, "--out", held, "--force", "--quiet")
    finally:
        reader.kill()
        reader.communicate()
    assert r.returncode == 2 and "in use by another process" in one_error_line(r)
    assert held.read_bytes() == before
    load(held)


@pytest.mark.slow
def test_a_run_being_written_refuses_force_resume_and_readers(tmp_path):
    """While a run writes x.h5: `run --force`, `run --resume` (a competing writer), `info` and `plot` are
    refused in one line (in use by another process), and the run goes on to a sound archive."""
    cfg = tmp_path / "c.toml"
    # spectral steps for minutes (noise: no continuation; dt_max bounds the step)
    cfg.write_text(CFG.replace('flow = "ascent"', 'flow = "ascent"\nnoise = 0.05').replace(
        "t_final = 1.0\nsave_every = 0.25\nnodes = 256", "t_final = 200.0\nsave_every = 1.0\ndt_max = 2e-4")
        .split("[particles]")[0])
    x = tmp_path / "x.h5"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen([sys.executable, "-m", "solvers.app.cli", "run", str(cfg), "--out", str(x), "--quiet"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not (x.exists() and x.stat().st_size) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        for args in (("run", cfg, "--out", x, "--force"), ("run", cfg, "--out", x, "--resume"), ("info", x),
                     ("plot", x, "--out", tmp_path / "png")):
            r = cli(*args)
            assert r.returncode == 2 and "in use by another process" in one_error_line(r), (args, r.stderr)
        assert writer.poll() is None, "the writing run stopped"
    finally:
        writer.send_signal(signal.SIGINT)
        writer.communicate(timeout=300)
    assert writer.returncode == 130
    assert load(x).status == "interrupted"


def test_a_lock_this_process_holds_is_shared_with_its_own_reader_and_refused_to_another_writer(tmp_path):
    from solvers import Model
    from solvers.app.archive import Lock, open_archive

    w = ArchiveWriter(tmp_path / "a.h5", "create", model=Model(2, 1.0, "ascent"))
    try:
        with pytest.raises(ArchiveInUse, match="in use by another writer of this process"):
            Lock(tmp_path / "a.h5", exclusive=True)
        with open_archive(tmp_path / "a.h5") as f:               # the run reading its own archive
            assert f.attrs["status"] == "running"
    finally:
        w.close()
    with Lock(tmp_path / "a.h5", exclusive=True):
        pass


# --- damaged and edited archives -------------------------------------------------------------------------
DAMAGE = {
    "the restart group deleted": (lambda f: f.__delitem__("pde/restart"), "/pde/restart is missing"),
    "the coefficients deleted": (lambda f: f.__delitem__("pde/coeffs"), "/pde/coeffs is missing"),
    "a restart time edited": (lambda f: _edit_state(f, "pde", "t", 0.6), "does not match its digest"),
    "/model@beta edited": (lambda f: f["model"].attrs.__setitem__("beta", 2.0), "/model differs"),
    "NaN restart nodes": (lambda f: _nan(f, "pde", "x"), "does not match its checksum"),
    "an energy edited": (lambda f: _bump(f["pde/energy"]), "/pde/energy does not match its checksum"),
    "a resolved option edited": (lambda f: f["pde"].attrs.__setitem__(
        "options", str(f["pde"].attrs["options"]).replace('"nodes": 256', '"nodes": 128')), "/pde@options"),
    "the configuration edited": (lambda f: f.attrs.__setitem__(
        "config", str(f.attrs["config"]).replace("nodes = 256", "nodes = 128")), "/@config"),
}


def _edit_state(f, section, key, value):
    r = f[f"{section}/restart"]
    old = r.attrs["state"]
    state = json.loads(old)
    state[key] = value
    r.attrs.modify("state", np.array(json.dumps(state).encode().ljust(len(old)),
                                     dtype=h5py.string_dtype("utf-8", len(old))))


def _nan(f, section, key):
    ds = f[f"{section}/restart/{json.loads(f[f'{section}/restart'].attrs['state'])['slot']}/{key}"]
    v = ds[()]
    v.reshape(-1)[0] = np.nan
    ds[...] = v


def _bump(ds):
    v = ds[()]
    v[1] += 1e-3
    ds[...] = v


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_or_edited_archive_is_refused_before_anything_changes(tmp_path, runs, damage):
    """Deleted groups and datasets, an edited restart time, /model@beta, NaN restart nodes, an edited series,
    option or configuration: load (info, plot) and the resume refuse the archive naming what is wrong, and
    the refused resume changes nothing (the archive said "starts from t = 0" and appended a second time
    series, or "succeeded" with rows missing)."""
    edit, words = DAMAGE[damage]
    path = copy(runs / "cut_pde.h5", tmp_path / "d.h5")
    with h5py.File(path, "r+") as f:
        edit(f)
    before = path.read_bytes()
    with pytest.raises(ArchiveDamaged, match="damaged archive") as e:
        load(path)
    assert words in str(e.value), str(e.value)
    with pytest.raises(ArchiveError) as e:
        run_config(parse_config(CFG), path, resume=True, progress=False, log=lambda s: None)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert path.read_bytes() == before


# an antipodal pair that passes a plateau and ends, certified, in one atom (tests/test_terminal.py)
PAIR = ('[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[initial]\nkind = "zonal_harmonic"\ndegree = 2\n'
        "amplitude = 0.5\n[pde]\ndegree = 32\nt_final = inf\nsave_every = 1.0\nnodes = 256\nhandoff_degree = 128\n")


@pytest.mark.parametrize("damage, words", [
    (lambda f: f.__delitem__("pde/terminal"), "/pde/terminal/"),
    (lambda f: f.__delitem__("pde/plateaus/natoms"), "/pde/plateaus/natoms is missing"),
    (lambda f: _bump(f["pde/plateaus/masses"]), "/pde/plateaus/masses does not match its checksum"),
    (lambda f: f["pde/terminal"].attrs.__setitem__("verdict", "unstable"), "/pde/terminal@verdict"),
], ids=["terminal deleted", "natoms deleted", "a plateau time edited", "the verdict edited"])
def test_the_terminal_state_and_plateaus_are_covered_by_the_checks(tmp_path, damage, words):
    """/pde/terminal and /pde/plateaus are part of what the stage's last commit covers: deleted or edited,
    the archive is refused naming them."""
    path = tmp_path / "pair.h5"
    assert run_config(parse_config(PAIR), path, progress=False, log=lambda s: None).status == "finished"
    run = load(path)
    assert run.pde.terminal.verdict == "stable" and len(run.pde.plateaus) == 1
    with h5py.File(path, "r+") as f:
        damage(f)
    with pytest.raises(ArchiveDamaged, match="damaged archive") as e:
        load(path)
    assert words in str(e.value), str(e.value)


def test_a_resume_never_starts_a_stage_over_inside_its_rows(tmp_path, runs):
    """The restart group of an unfinished stage gone: its rows are not followed by a second time series
    from t = 0; the resume is refused."""
    path = copy(runs / "cut_particles.h5", tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        del f["particles/restart"]
    with pytest.raises(ArchiveDamaged, match=r"/particles/restart is missing \(\d+ snapshot rows"):
        check_resumable(path, parse_config(CFG))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["the density deleted", "a chunk of the density corrupted", "truncated"])
def test_info_and_plot_report_damage_in_one_line(tmp_path, runs, damage):
    """plot of an archive whose density was deleted raised IndexError; a flipped byte or a cut file: every
    command says what is wrong in one line, exit 2, no traceback."""
    path = copy(runs / "full.h5", tmp_path / "d.h5")
    if damage == "the density deleted":
        with h5py.File(path, "r+") as f:
            del f["pde/density"]
    elif damage == "truncated":
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size * 2 // 3)
    else:
        with h5py.File(path, "r") as f:
            offset = f["pde/density"].id.get_chunk_info(0).byte_offset
        data = bytearray(path.read_bytes())
        data[offset + 20] ^= 0x10
        path.write_bytes(bytes(data))
    for args in (("info", path), ("info", path, "--layout"), ("plot", path, "--out", tmp_path / "png")):
        r = cli(*args)
        if damage != "truncated" and args[-1] == "--layout":
            assert r.returncode == 0, r.stderr             # the layout shows the structure, whatever the values
            continue
        assert r.returncode == 2 and ("damaged archive" in one_error_line(r) or "not a readable" in r.stderr), r.stderr


def test_a_format_from_the_future_names_the_version(tmp_path, runs):
    path = copy(runs / "full.h5", tmp_path / "v.h5")
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(ArchiveError, match=r"format version 99 is newer than this software reads \(3\); upgrade "
                                           r"attnpde \(it was written by attnpde \d"):
        load(path)


#: how far this run's PDE coefficients (c_0 = 1) made on two CPUs may differ: the continuation amplifies a
#: change of one ulp, in its input or in a kernel's rounding, to well below this bound, while a resume with other
#: options moves them far above it (docs/numerics.md, "Same answer on every machine", measures both)
ACROSS_CPUS_ATOL = 1e-7


@pytest.mark.cpu_dependent
def test_an_archive_of_the_writer_before_the_checksums_loads_and_resumes(tmp_path):
    """An archive the previous writer made (format 3 without checksums, commit 862866c, from
    tests/data/format_v3_unchecked.toml, which sets the node tolerances and drift_tol that version had as
    defaults), cut by Ctrl-C in its continuation: it loads, and resumes to the numbers of the same run made
    here, as far as runs on two CPUs can agree.

    The archive was made on another CPU, whose kernels (numpy's SIMD loops, FFTW's codelets) round
    differently. What is the same on every machine is compared exactly: the output times (save_every fixes
    them), the spectral steps, which ended before the cut (the resume keeps them as stored), and the
    particles, which both runs compute here. The coefficients after the cut agree to the continuation's
    amplified round-off, ``ACROSS_CPUS_ATOL``; the node steps after the cut may differ in number (whether a
    step is accepted can turn on round-off), so they are only required to go on from the cut."""
    import lzma
    data = ROOT / "tests" / "data"
    path = tmp_path / "v3.h5"
    path.write_bytes(lzma.decompress((data / "format_v3_unchecked.h5.xz").read_bytes()))
    run = load(path)
    assert run.status == "interrupted" and "checksums" not in run.attrs and run.pde.stop_reason == "interrupted"
    assert run.pde.restart["phase"] == "lagrangian"
    config = parse_config((data / "format_v3_unchecked.toml").read_text())
    assert run_config(config, path, resume=True, progress=False, log=lambda s: None).status == "finished"
    run_config(config, tmp_path / "ref.h5", progress=False, log=lambda s: None)
    a, b = load(path), load(tmp_path / "ref.h5")
    assert np.array_equal(a.pde.t, b.pde.t) and np.array_equal(a.particles.t, b.particles.t)
    assert a.pde.nsteps == run.pde.nsteps and a.pde.steps.keys() == run.pde.steps.keys()
    assert all(np.array_equal(a.pde.steps[k], run.pde.steps[k]) for k in run.pde.steps)
    assert a.pde.lagrangian.node_nsteps > run.pde.restart["node_nsteps"]
    np.testing.assert_allclose(a.pde.coeffs, b.pde.coeffs, rtol=0, atol=ACROSS_CPUS_ATOL)
    assert np.array_equal(a.particles.x, b.particles.x) and a.attrs["resumed"] == 1


def test_root_annotations_edited_by_hand_are_reported_not_refused(tmp_path, runs):
    """The command line, the library versions: a user may edit them (the tests do, to stand for another
    version); info reports the change in one line and the archive stays usable."""
    from solvers.app.info import describe
    path = copy(runs / "full.h5", tmp_path / "a.h5")
    with h5py.File(path, "r+") as f:
        f.attrs["command"] = "attnpde run elsewhere.toml"
    assert load(path).warnings == ["/@command"]
    assert "warning: /@command changed since attnpde wrote it (edited by hand, or damaged)" in describe(path)


# --- the archive's own words ---------------------------------------------------------------------------
def test_the_options_are_stored_as_resolved(runs):
    """Every option the run left to a default is stored with the value it used (a later version with other
    defaults re-runs the same run from the record); only what the run computes (dt0, atom_radius) or what
    means "none" (dt_max, handoff_at, filter) stays null, and the stage says so."""
    with h5py.File(runs / "full.h5") as f:
        pde = json.loads(f["pde"].attrs["options"])
        particles = json.loads(f["particles"].attrs["options"])
        note = f["pde"].attrs["options_note"]
    assert {k for k, v in pde.items() if v is None} == {"dt0", "atom_radius", "dt_max", "handoff_at", "filter"}
    assert pde["max_degree"] == 65536 and pde["output_points"] == 1024 and pde["continuation"] == "lagrangian"
    assert pde["handoff_degree"] == 1024 and pde["nodes"] == 256
    assert "dt0" in note and "atom_radius" in note
    assert particles["integrator"] == "rk4" and particles["init"] == "random" and particles["seed"] == 3
    assert particles["sum"] == "auto" and particles["sum_method"] in ("direct", "fast", "nufft")


@pytest.mark.cpu_dependent
def test_a_resume_across_a_changed_default_is_refused_naming_the_version(tmp_path, runs, monkeypatch):
    """A version whose default differs (here the output grid of S^1) would resume another run: refused, with
    both values and the version that started it; the same archive resumes as before once the default is
    back."""
    from solvers.pde_circle import CircleSpace
    path = copy(runs / "cut_pde.h5", tmp_path / "c.h5")
    monkeypatch.setattr(CircleSpace, "default_output_points", 512)
    with pytest.raises(RunRefused, match=r"attnpde \S+ started this run with other defaults than this version's "
                                         r"\(\S+\): pde.output_points: 1024 in the archive, 512 now"):
        check_resumable(path, parse_config(CFG))
    monkeypatch.undo()
    assert run_config(parse_config(CFG), path, resume=True, progress=False, log=lambda s: None).status == "finished"
    same_run(path, runs / "full.h5")


def test_a_changed_node_tolerance_default_is_refused_naming_both_options(tmp_path, runs, monkeypatch):
    """The node step tolerances, which follow the node spacing by default (pde.NODE_TOLERANCE), are stored as
    the run resolved them: another default names both."""
    from solvers import pde_spec
    path = copy(runs / "cut_pde.h5", tmp_path / "c.h5")
    monkeypatch.setattr(pde_spec, "NODE_TOLERANCE", pde_spec.NODE_TOLERANCE / 2)
    with pytest.raises(RunRefused, match=r"other defaults than this version's \(\S+\): pde.node_atol: \S+ in the "
                                         r"archive, \S+ now; pde.node_rtol: \S+ in the archive, \S+ now;"):
        check_resumable(path, parse_config(CFG))


@pytest.mark.cpu_dependent
def test_a_resume_with_an_option_given_explicitly_is_exact_across_a_changed_default(tmp_path, monkeypatch):
    """The option written in the configuration: another default changes nothing; the resume is exact."""
    from solvers.pde_circle import CircleSpace
    text = CFG.replace("nodes = 256", "nodes = 256\noutput_points = 1024")
    full, part = tmp_path / "full.h5", tmp_path / "part.h5"
    run_config(parse_config(text), full, progress=False, log=lambda s: None)
    cut(part, text, "pde", 2, monkeypatch)
    monkeypatch.setattr(CircleSpace, "default_output_points", 512)
    assert run_config(parse_config(text), part, resume=True, progress=False, log=lambda s: None).status == "finished"
    same_run(part, full)


def test_placeholder_dimensions_and_the_ragged_node_measure_say_what_they_are(runs):
    with h5py.File(runs / "full.h5") as f:
        placeholders = []
        f.visititems(lambda n, o: placeholders.append(o) if isinstance(o, h5py.Dataset) and "NAME" in o.attrs
                     and "netCDF dimension but not" in o.attrs["NAME"].decode() else None)
        assert len(placeholders) > 10
        for ds in placeholders:
            name = ds.name.rsplit("/", 1)[-1]
            assert ds.attrs["long_name"].startswith(f"dimension '{name}': "), ds.name
            assert "holds no data" in ds.attrs["comment"], ds.name
        lg = f["pde/lagrangian"]
        assert "np.split(x, np.cumsum(node_count)[:-1])" in lg["x"].attrs["description"]
        assert lg["w"].attrs["units"] == "1" and "ragged" in lg["w"].attrs["long_name"]
        assert "node_count" in lg.attrs["layout"]


def test_info_layout_prints_the_layout(runs, capsys):
    from solvers.app.cli import main
    assert main(["info", str(runs / "full.h5"), "--layout"]) == 0
    text = capsys.readouterr().out
    assert "checksums: fletcher32+crc32" in text
    assert "/pde/coeffs" in text and "[t, k] spectral coefficients of rho" in text
    assert "/pde/t" in text and "coordinate: time (depth, in layers)" in text
    assert "dimensions without coordinates (empty placeholder datasets: no data" in text
    assert "particle             particle (its index in the initial sample)" in text
    assert "/pde/lagrangian: the node measures of all node snapshots" in text


# --- the campaign ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sample_of_the_fault_campaign_finds_nothing_lost_or_wrong(tmp_path):
    """scripts/archive_faults.py --quick: locks, read-only files, edits of every kind, cut and bit-flipped
    files, kill -9 of a run and of a sweep, the file size limit at random points: every trial refused in
    one line or done right; no traceback, hang, crash, or data lost or wrong."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "archive_faults.py"), "--quick", "--json",
                        str(tmp_path / "trials.json")], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=3000)
    trials = json.loads((tmp_path / "trials.json").read_text())
    bad = [t for t in trials if t["outcome"] != "ok"]
    assert r.returncode == 0 and not bad, (bad, r.stdout[-3000:], r.stderr[-3000:])
    assert {t["group"] for t in trials} >= {"locks", "tamper", "truncate", "flip", "kill", "sweep", "space"}
