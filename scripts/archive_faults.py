#!/usr/bin/env python3
"""Fault campaign of attnpde's archives: the command against archives that are locked, read-only, edited,
cut, bit-flipped, killed in the middle of a write or starved of room, one outcome per trial, in one table.

    .venv/bin/python scripts/archive_faults.py [--quick] [--seed N] [--only GROUP ...] [--json PATH]

Groups (each trial runs ``attnpde`` in a subprocess, as a user would):

  locks      ``run --force`` while a run writes the archive and while a program reads it, ``run --resume``
             while a run writes it, two runs started at once on one path, ``info`` of an archive being written
  readonly   a read-only archive, a read-only directory (as an unprivileged user when run as root)
  tamper     every kind of dataset and attribute edited or deleted with h5py (an interrupted run, a finished
             one): ``info``, ``plot`` and ``run --resume`` of each
  truncate   the archive cut at random offsets
  flip       one bit flipped at a random offset
  kill       kill -9 of ``attnpde run`` at a random moment (every phase: imports, spectral steps, the
             continuation, its error-estimate rerun, particles, comparison), then ``--resume``
  sweep      kill -9 of ``attnpde sweep`` (its process group) at a random moment, then ``sweep --resume``
  space      the file size limit (RLIMIT_FSIZE) at a random size below the archive's, then ``--resume``
             without it

Outcomes: "ok" (refused in one line, exit 1 or 2, where the archive is bad or busy; done to the uninterrupted
run's numbers where it can be; or a harmless change), "traceback", "hang" (no end within the timeout),
"crash" (ended by a signal), "lost or wrong" (exit 0 with data that differ from the uninterrupted run, an
edit shown as sound, or a resumable archive refused or unreadable). The target: only "ok".
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
TIMEOUT = 240

# the PDE past its handoff (spectral steps, the continuation, its error-estimate rerun), then particles and
# the comparison; a state kept every 0.05 s, so that kills land between checkpoints too
CONFIG = """
[run]
name = "faults"
checkpoint_interval = 0.05
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
t_final = 3.0
save_every = 0.5
[particles]
n = 300
seed = 7
integrator = "rk4"
dt = 0.01
t_final = 4.0
save_every = 0.5
[compare]
moments = 4
"""
SWEEP_CONFIG = CONFIG.replace("[compare]\nmoments = 4\n", "").replace("t_final = 3.0", "t_final = 1.5")


# --- running the command ------------------------------------------------------------------------------
def attnpde(*args, cwd: Path, timeout: float = TIMEOUT, limit: int | None = None, script: str | None = None):
    """The command in a subprocess: CompletedProcess, or None when it did not end within ``timeout``."""
    def pre():
        os.setsid()
        # Ctrl-C reaches the command even when the campaign runs in the background (SIGINT ignored there)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if limit is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    head = [PY, script] if script else [PY, "-m", "solvers.app.cli"]
    proc = subprocess.Popen(head + [str(a) for a in args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pre)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kind(proc) -> str:
    """What a command did: hang, crash, traceback, refused (exit 1 or 2 and one error line), accepted (0),
    or other (an exit status or message of no kind above)."""
    if proc is None:
        return "hang"
    if proc.returncode < 0 or proc.returncode >= 128 and proc.returncode not in (130, 141, 143):
        return "crash"
    if "Traceback" in proc.stderr:
        return "traceback"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("attnpde: error:")]
    if proc.returncode in (1, 2) and len(errors) == 1:
        return "refused"
    if proc.returncode == 0:
        return "accepted"
    return f"other (exit {proc.returncode}, {len(errors)} error lines)"


# --- comparing archives -------------------------------------------------------------------------------
def datasets(path: Path) -> dict:
    """Every dataset of an archive (its path -> values), as h5py reads it."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def load_status(path: Path) -> str:
    """The status of an archive ("" when it cannot be read)."""
    from solvers.app.archive import ArchiveError, load
    try:
        return load(path).status
    except ArchiveError:
        return ""


def differences(path: Path, ref: Path) -> list[str]:
    """How two archives of one configuration differ (empty: the same run): every dataset, the same set and
    the same values, and the run as ``load`` reads it."""
    from solvers.app.archive import load
    a, b = load(path), load(ref)
    da, db = datasets(path), datasets(ref)
    out = [f"dataset {k}" for k in sorted(set(da) ^ set(db))]
    out += [f"dataset {k}" for k in sorted(set(da) & set(db))
            if da[k].shape != db[k].shape or not np.array_equal(da[k], db[k], equal_nan=da[k].dtype.kind in "fc")]

    def same(name, x, y):
        if x is None or y is None:
            if (x is None) != (y is None):
                out.append(name)
            return
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            out.append(name)

    for stage in ("pde", "particles"):
        ra, rb = getattr(a, stage), getattr(b, stage)
        if (ra is None) != (rb is None):
            out.append(stage)
            continue
        if ra is None:
            continue
        keys = (("t", "coeffs", "density", "degree", "energy", "mass", "tail") if stage == "pde"
                else ("t", "x", "w", "energy", "max_drift", "cluster_count"))
        for k in keys:
            same(f"{stage}.{k}", getattr(ra, k), getattr(rb, k))
        if ra.stop_reason != rb.stop_reason or ra.nsteps != rb.nsteps:
            out.append(f"{stage}.end")
        if stage == "pde":
            for k in ("t", "dt", "error", "accepted"):
                same(f"pde.steps.{k}", ra.steps.get(k), rb.steps.get(k))
            for i, (na, nb) in enumerate(zip(ra.nodes, rb.nodes)):
                if (na is None) != (nb is None) or na is not None and any(
                        not np.array_equal(na[k], nb[k]) for k in ("x", "w", "count")):
                    out.append(f"pde.nodes[{i}]")
    for k in set(a.atoms) | set(b.atoms):
        x, y = a.atoms.get(k), b.atoms.get(k)
        if isinstance(x, dict) or isinstance(y, dict):
            if x != y:
                out.append(f"atoms {k}")
        elif isinstance(x, tuple) or isinstance(y, tuple):
            if x is None or y is None or any(not np.array_equal(u, v) for u, v in zip(x, y)):
                out.append(f"atoms {k}")
        else:
            same(f"atoms {k}", x, y)
    if (a.comparison is None) != (b.comparison is None):
        out.append("comparison")
    elif a.comparison is not None:
        for k in ("t", "w1", "mmd", "moment_gap", "energy_gap"):
            same(f"comparison.{k}", getattr(a.comparison, k), getattr(b.comparison, k))
    if a.status != b.status:
        out.append(f"status {a.status!r}")
    return out


class Campaign:
    def __init__(self, work: Path, seed: int, quick: bool) -> None:
        self.work, self.rng, self.quick = work, random.Random(seed), quick
        self.verbose = False
        self.rows: list[dict] = []
        self.cfg = work / "c.toml"
        self.cfg.write_text(CONFIG)
        self.ref = work / "full.h5"
        # the reference run, and when its archive appeared: kills land between that and its end
        t0 = time.perf_counter()
        proc = subprocess.Popen([PY, "-m", "solvers.app.cli", "run", str(self.cfg), "--out", str(self.ref), "--quiet"],
                                cwd=work, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.created = None
        while proc.poll() is None:
            if self.created is None and self.ref.exists():
                self.created = time.perf_counter() - t0
            time.sleep(0.005)
        self.duration = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr.read()
        self.created = self.created or 0.5
        self.ref_info = self.info_text(self.ref)
        self.cut = {}
        # interrupted (SIGINT) in the continuation, and in the particles (past the PDE's t_final: the signal
        # goes at the first step of either solver past the time)
        for name, at in (("pde", 1.7), ("particles", 3.3)):
            path = work / f"cut_{name}.h5"
            r = attnpde(str(at), str(int(signal.SIGINT)), "run", self.cfg, "--out", path, "--quiet", cwd=work,
                        script=str(ROOT / "tests" / "signal_after_time.py"))
            assert r is not None and r.returncode == 130, r and r.stderr
            self.cut[name] = path

    def info_text(self, path: Path) -> str | None:
        r = attnpde("info", path, cwd=self.work)
        return None if r is None or r.returncode else r.stdout.replace(str(path), "ARCHIVE")

    def record(self, group: str, case: str, outcome: str, detail: str = "") -> None:
        self.rows.append({"group": group, "case": case, "outcome": outcome, "detail": detail[:300]})
        mark = "" if outcome == "ok" else "   <-- " + outcome
        print(f"  {group:9s} {case:60s} {outcome}{mark} {detail[:120] if outcome != 'ok' or self.verbose else ''}",
              flush=True)

    def copy(self, src: Path, name: str) -> Path:
        dst = self.work / name
        shutil.copyfile(src, dst)
        return dst

    def check_refusal(self, group: str, case: str, proc, *, expect: str = "") -> None:
        k = kind(proc)
        if k == "refused" and expect and expect not in proc.stderr:
            self.record(group, case, "ok", f"refused, but not naming {expect!r}: {proc.stderr.strip()[-200:]}")
        elif k == "refused":
            self.record(group, case, "ok", next(line for line in proc.stderr.splitlines()
                                                if line.startswith("attnpde: error:")))
        elif k == "accepted":
            self.record(group, case, "lost or wrong", "accepted: " + proc.stdout.strip()[-150:])
        else:
            self.record(group, case, k, "" if proc is None else proc.stderr.strip()[-300:])

    def resume_to_reference(self, group: str, case: str, path: Path, *, limit: int | None = None,
                            command: tuple = ()) -> None:
        """--resume ``path``: ok when it ends with the uninterrupted run's numbers (the detail: where it
        resumed each stage)."""
        r = attnpde(*(command or ("run", self.cfg)), "--out", path, "--resume", "--quiet", cwd=self.work, limit=limit)
        k = kind(r)
        if k != "accepted":
            self.record(group, case, "lost or wrong" if k == "refused" else k,
                        "" if r is None else r.stderr.strip()[-300:])
            return
        diff = differences(path, self.ref)
        where = "; ".join(line.split(" (")[0] for line in r.stderr.splitlines()
                          if "resuming from" in line or "starts from t = 0" in line or "already complete" in line)
        self.record(group, case, "ok" if not diff else "lost or wrong", where + (": " + ", ".join(diff) if diff else ""))

    # --- groups -------------------------------------------------------------------------------------
    def locks(self) -> None:
        w = self.work
        long_cfg = w / "long.toml"
        # spectral steps for minutes (noise: no continuation; dt_max bounds the step)
        long_cfg.write_text(CONFIG.replace('flow = "ascent"', 'flow = "ascent"\nnoise = 0.05').replace(
            "t_final = 3.0\nsave_every = 0.5", "t_final = 200.0\nsave_every = 1.0\ndt_max = 2e-4").split("[particles]")[0])
        # a run writing x.h5; meanwhile --force, --resume, info and a second run on the same path
        x = w / "x.h5"
        a = subprocess.Popen([PY, "-m", "solvers.app.cli", "run", str(long_cfg), "--out", str(x), "--quiet"], cwd=w,
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not (x.exists() and x.stat().st_size > 0) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)
        for case, args, expect in (
                ("run --force while a run writes the archive", ("run", long_cfg, "--out", x, "--force"), "in use"),
                ("run --resume while a run writes it (competing writers)", ("run", long_cfg, "--out", x, "--resume"),
                 "in use"),
                ("a second run on the same path (no --force)", ("run", long_cfg, "--out", x), "exists"),
                ("info of an archive being written", ("info", x), "in use"),
                ("plot of an archive being written", ("plot", x, "--out", w / "px"), "in use")):
            self.check_refusal("locks", case, attnpde(*args, cwd=w), expect=expect)
        a.send_signal(signal.SIGINT)                     # run A ends cleanly: its archive must be sound
        a.communicate(timeout=TIMEOUT)
        r = attnpde("info", x, cwd=w)
        self.record("locks", "the writing run's archive after all that", "ok" if kind(r) == "accepted"
                    else "lost or wrong", "" if r is None else r.stderr.strip()[-200:])
        # a finished archive held open by a reader (h5py, HDF5's own lock); --force refused, file untouched
        held = self.copy(self.ref, "held.h5")
        before = held.read_bytes()
        reader = subprocess.Popen([PY, "-c", f"import h5py, time\nf = h5py.File({str(held)!r}, 'r')\nprint('open', "
                                   "flush=True)\ntime.sleep(60)"], env=ENV, stdout=subprocess.PIPE, text=True)
        reader.stdout.readline()
        r = attnpde("run", self.cfg, "--out", held, "--force", "--quiet", cwd=w)
        reader.kill()
        reader.communicate()
        self.check_refusal("locks", "run --force while a reader holds a finished archive", r, expect="in use")
        self.record("locks", "  ... the refused archive is byte-identical", "ok" if held.read_bytes() == before
                    else "lost or wrong")
        # two fresh runs started at once on one path: one writes, the other is refused; the archive is sound
        both = w / "both.h5"
        procs = [subprocess.Popen([PY, "-m", "solvers.app.cli", "run", str(self.cfg), "--out", str(both), "--quiet"],
                                  cwd=w, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [subprocess.CompletedProcess(p.args, p.wait(TIMEOUT), *p.communicate()) for p in procs]
        kinds = sorted(kind(r) for r in results)
        ok = kinds == ["accepted", "refused"] and not differences(both, self.ref)
        self.record("locks", "two runs started at once on one path", "ok" if ok else "lost or wrong", str(kinds))

    def readonly(self) -> None:
        """A read-only archive and directory: by permissions, or (as root, whom permissions do not stop) on a
        file system mounted read-only."""
        w = self.work
        if os.geteuid() == 0:
            d = w / "romount"
            d.mkdir()
            if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)]).returncode:
                print("  (as root without mount: the read-only cases are skipped)")
                return
            try:
                shutil.copyfile(self.cut["pde"], d / "ro.h5")
                shutil.copyfile(self.ref, d / "done.h5")
                subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
                self._readonly_cases(d / "ro.h5", d / "done.h5", d / "new.h5", "read-only")
            finally:
                subprocess.run(["umount", str(d)])
            return
        d = w / "ro"
        d.mkdir()
        ro, done = d / "ro.h5", d / "done.h5"
        shutil.copyfile(self.cut["pde"], ro)
        shutil.copyfile(self.ref, done)
        for p in (ro, done):
            os.chmod(p, 0o444)
        os.chmod(d, 0o555)
        try:
            self._readonly_cases(ro, done, d / "new.h5", "read-only")
        finally:
            os.chmod(d, 0o755)
        # a read-only directory: the archive in it is writable (it resumes)
        rd = w / "rodir"
        rd.mkdir()
        cut = rd / "cut.h5"
        shutil.copyfile(self.cut["particles"], cut)
        os.chmod(rd, 0o555)
        try:
            r = attnpde("run", self.cfg, "--out", cut, "--resume", "--quiet", cwd=w)
            k = kind(r)
            self.record("readonly", "run --resume in a read-only directory (the file writable)",
                        "ok" if k == "accepted" and not differences(cut, self.ref) else
                        ("lost or wrong" if k in ("accepted", "refused") else k), "" if r is None else r.stderr[-200:])
        finally:
            os.chmod(rd, 0o755)

    def _readonly_cases(self, ro: Path, done: Path, new: Path, expect: str) -> None:
        w = self.work
        r = attnpde("run", self.cfg, "--out", ro, "--resume", "--quiet", cwd=w)
        self.check_refusal("readonly", "run --resume of a read-only archive", r, expect=expect)
        r = attnpde("info", ro, cwd=w)
        self.record("readonly", "info of a read-only archive", "ok" if kind(r) == "accepted" else kind(r),
                    "" if r is None else r.stderr.strip()[-200:])
        before = done.read_bytes()
        r = attnpde("run", self.cfg, "--out", done, "--force", "--quiet", cwd=w)
        self.check_refusal("readonly", "run --force over a read-only archive", r)
        self.record("readonly", "  ... it is byte-identical", "ok" if done.read_bytes() == before else "lost or wrong")
        r = attnpde("run", self.cfg, "--out", new, "--quiet", cwd=w)
        self.check_refusal("readonly", "a new run in a read-only directory", r, expect="cannot be created")

    def tamper(self) -> None:
        import h5py

        def edit_state(key, value):
            def op(f, section):                          # the JSON edited in place (its digest left as it was)
                r = f[f"{section}/restart"]
                old = r.attrs["state"]
                state = json.loads(old)
                state[key] = value(state[key]) if callable(value) else value
                text = json.dumps(state)
                r.attrs.modify("state", text if isinstance(old, str) else np.array(
                    text.encode().ljust(len(old)), dtype=h5py.string_dtype("utf-8", len(old))))
            return op

        def slot(f, section):
            return f"{section}/restart/" + json.loads(f[f"{section}/restart"].attrs["state"])["slot"]

        def set_values(path_of, value):
            def op(f, section):
                ds = f[path_of(f, section)]
                v = ds[()]
                flat = v.reshape(-1)
                flat[len(flat) // 2] = value(flat[len(flat) // 2])
                ds[...] = v
            return op

        def delete(path_of):
            def op(f, section):
                del f[path_of(f, section)]
            return op

        def attr(path_of, key, value):
            def op(f, section):
                f[path_of(f, section)].attrs[key] = value
            return op

        at = lambda p: (lambda f, s: p.format(s=s))                      # noqa: E731
        ops = [
            ("delete the restart group", delete(at("{s}/restart"))),
            ("delete the restart state's slot", delete(slot)),
            ("delete the restart state (attribute)", lambda f, s: f[f"{s}/restart"].attrs.__delitem__("state")),
            ("edit the restart time (state JSON)", edit_state("t", lambda t: t + 0.05)),
            ("edit the restart's snapshot count", edit_state("snapshots", lambda n: n - 1)),
            ("name the other slot", edit_state("slot", lambda v: "b" if v == "a" else "a")),
            ("NaN in a restart array", set_values(lambda f, s: slot(f, s) + ("/x" if "x" in f[slot(f, s)] else "/coeffs"),
                                                 lambda v: np.nan)),
            ("change a restart array value", set_values(lambda f, s: slot(f, s) + ("/x" if "x" in f[slot(f, s)]
                                                                                   else "/coeffs"), lambda v: v * 1.001)),
            ("delete the time axis t", delete(at("{s}/t"))),
            ("delete the series (coeffs / x)", delete(lambda f, s: f"{s}/coeffs" if s == "pde" else f"{s}/x")),
            ("delete the density / weights", delete(lambda f, s: f"{s}/density" if s == "pde" else f"{s}/w")),
            ("delete the energy series", delete(at("{s}/energy"))),
            ("edit a series value (energy)", set_values(at("{s}/energy"), lambda v: v + 1e-3)),
            ("edit a snapshot time", set_values(at("{s}/t"), lambda v: v + 1e-3)),
            ("edit a coefficient / position", set_values(lambda f, s: f"{s}/coeffs" if s == "pde" else f"{s}/x",
                                                         lambda v: v * 1.01)),
            ("edit a weight / output grid point", set_values(lambda f, s: "pde/grid" if s == "pde" else f"{s}/w",
                                                             lambda v: v * 1.01)),
            ("delete the step log / the cluster counts", delete(lambda f, s: "pde/steps" if s == "pde"
                                                               else f"{s}/n_clusters")),
            ("edit a step size", set_values(lambda f, s: "pde/steps/dt" if s == "pde" else f"{s}/max_drift",
                                            lambda v: v * 2)),
            ("delete the node measures (lagrangian)", delete(lambda f, s: "pde/lagrangian" if s == "pde"
                                                             else f"{s}/energy")),
            ("edit a node position", set_values(lambda f, s: "pde/lagrangian/x" if s == "pde" else f"{s}/x",
                                                lambda v: v * 0.5)),
            ("edit the handoff record", attr(lambda f, s: "pde/lagrangian" if s == "pde" else s, "handoff",
                                             '{"t": 0.5}')),
            ("edit /model@beta", attr(at("model"), "beta", 2.0)),
            ("edit /model@flow", attr(at("model"), "flow", "descent")),
            ("edit a perceptron weight", set_values(at("model/perceptron/a"), lambda v: -v)),
            ("delete /model", delete(at("model"))),
            ("edit the configuration text (beta)", lambda f, s: f.attrs.__setitem__(
                "config", str(f.attrs["config"]).replace("beta = 6.0", "beta = 7.0"))),
            ("edit a resolved option (nodes / seed)", lambda f, s: f[s].attrs.__setitem__("options", str(
                f[s].attrs["options"]).replace('"nodes": 4096', '"nodes": 2048').replace('"seed": 7', '"seed": 8'))),
            ("format_version from the future", attr(lambda f, s: "/", "format_version", 99)),
            ("not an attnpde archive (format)", attr(lambda f, s: "/", "format", "something else")),
            ("delete the atoms (finished)", delete(lambda f, s: f"atoms/{s}")),
            ("edit an atom mass (finished)", set_values(lambda f, s: f"atoms/{s}/masses", lambda v: v + 0.1)),
            ("delete the comparison (finished)", delete(lambda f, s: "comparison")),
            ("edit a comparison distance (finished)", set_values(lambda f, s: "comparison/mmd", lambda v: v * 2)),
            ("delete a whole stage (finished)", delete(lambda f, s: s)),
        ]
        bases = [("pde", self.cut["pde"], "pde"), ("particles", self.cut["particles"], "particles"),
                 ("finished", self.ref, "pde")]
        if self.quick:                     # a sample: every third kind, on the continuation and the finished run
            ops, bases = ops[::3], bases[::2]
        n = 0
        for name, op in ops:
            for base, src, section in bases:
                finished = base == "finished"
                if "(finished)" in name and not finished:
                    continue
                if name.startswith("edit the handoff") and section != "pde":
                    continue
                n += 1
                path = self.copy(src, f"t{n}.h5")
                try:
                    with h5py.File(path, "r+") as f:
                        op(f, section)
                except (KeyError, ValueError, OSError, TypeError) as e:
                    self.record("tamper", f"{name} [{base}]", "ok", f"(not applicable: {e})")
                    print(f"      not applicable: {str(e)[:150]}")
                    continue
                case = f"{name} [{base}]"
                self.check_refusal("tamper", f"info: {case}", attnpde("info", path, cwd=self.work))
                if not finished:
                    r = attnpde("run", self.cfg, "--out", path, "--resume", "--quiet", cwd=self.work)
                    if kind(r) == "accepted":                # a harmless edit: then the run must be the same
                        diff = differences(path, self.ref)
                        self.record("tamper", f"resume: {case}", "ok" if not diff else "lost or wrong",
                                    "resumed" + (": " + ", ".join(diff) if diff else " exactly"))
                    else:
                        self.check_refusal("tamper", f"resume: {case}", r)
                if self.quick and not finished:
                    continue
                self.check_refusal("tamper", f"plot: {case}", attnpde("plot", path, "--out", self.work / "p",
                                                                     cwd=self.work))

    def truncate(self, trials: int) -> None:
        for i in range(trials):
            base, src = self.rng.choice([("finished", self.ref), ("pde", self.cut["pde"]),
                                         ("particles", self.cut["particles"])])
            size = src.stat().st_size
            cut = self.rng.randrange(0, size)
            path = self.copy(src, f"tr{i}.h5")
            with open(path, "r+b") as fh:
                fh.truncate(cut)
            case = f"{base} cut to {cut} of {size} bytes"
            self.check_refusal("truncate", f"info: {case}", attnpde("info", path, cwd=self.work))
            if base != "finished":
                self.check_refusal("truncate", f"resume: {case}",
                                   attnpde("run", self.cfg, "--out", path, "--resume", "--quiet", cwd=self.work))

    def flip(self, trials: int) -> None:
        infos = {"finished": self.ref_info, **{k: self.info_text(v) for k, v in self.cut.items()}}
        for i in range(trials):
            base, src = self.rng.choice([("finished", self.ref), ("pde", self.cut["pde"]),
                                         ("particles", self.cut["particles"])])
            data = bytearray(src.read_bytes())
            at, bit = self.rng.randrange(len(data)), self.rng.randrange(8)
            data[at] ^= 1 << bit
            path = self.work / f"fl{i}.h5"
            path.write_bytes(bytes(data))
            case = f"{base}: bit {bit} of byte {at}"
            r = attnpde("info", path, cwd=self.work)
            k = kind(r)
            if k == "accepted":
                text = r.stdout.replace(str(path), "ARCHIVE").replace(str(src), "ARCHIVE")
                same = text == infos[base]
                changed = [line.strip() for line in text.splitlines() if line not in infos[base].splitlines()]
                warned = bool(changed) and all("changed since attnpde wrote it" in line for line in changed)
                self.record("flip", f"info: {case}", "ok" if same or warned else "lost or wrong",
                            "no effect (an unused byte)" if same else "reported in one line: " + changed[0]
                            if warned else "accepted with other content: " + " | ".join(changed)[:200])
            else:
                self.check_refusal("flip", f"info: {case}", r)
            if base != "finished":
                r = attnpde("run", self.cfg, "--out", path, "--resume", "--quiet", cwd=self.work)
                if kind(r) == "accepted":
                    diff = differences(path, self.ref)
                    self.record("flip", f"resume: {case}", "ok" if not diff else "lost or wrong",
                                "resumed exactly (an unused byte)" if not diff else ", ".join(diff))
                else:
                    self.check_refusal("flip", f"resume: {case}", r)

    def kill(self, trials: int) -> None:
        """kill -9 at a random moment between the archive's creation and the run's end; a kill that comes after
        the run finished is drawn again (earlier), so that every trial cuts a run."""
        for i in range(trials):
            path = self.work / f"k{i}.h5"
            end = self.duration * 0.95
            for attempt in range(6):
                path.unlink(missing_ok=True)
                at = self.rng.uniform(self.created, end)
                proc = subprocess.Popen([PY, "-m", "solvers.app.cli", "run", str(self.cfg), "--out", str(path),
                                         "--quiet"], cwd=self.work, env=ENV, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                time.sleep(at)
                proc.send_signal(signal.SIGKILL)
                proc.communicate()
                if proc.returncode == -signal.SIGKILL and (not path.exists() or load_status(path) != "finished"):
                    break
                end = at                                  # it was over by then: draw an earlier moment
            case = f"kill -9 at {at:.2f} s (the reference run: {self.duration:.1f} s)"
            if not path.exists():
                self.record("kill", case, "ok", "before the archive existed: nothing to resume")
                continue
            if load_status(path) == "finished":          # six draws all came after the end
                diff = differences(path, self.ref)
                self.record("kill", case, "ok" if not diff else "lost or wrong",
                            "finished before the kill" + (": " + ", ".join(diff) if diff else ""))
                continue
            self.resume_to_reference("kill", case, path)

    def sweep(self, trials: int) -> None:
        cfg = self.work / "sw.toml"
        cfg.write_text(SWEEP_CONFIG)
        ref_dir = self.work / "sw_ref"
        t0 = time.perf_counter()
        r = attnpde("sweep", cfg, "--beta", "4,6", "--workers", "2", "--out", ref_dir, cwd=self.work)
        assert r is not None and r.returncode == 0, r and r.stderr
        duration = time.perf_counter() - t0
        for i in range(trials):
            out = self.work / f"sw{i}"
            at = self.rng.uniform(1.0, duration * 0.97)
            proc = subprocess.Popen([PY, "-m", "solvers.app.cli", "sweep", str(cfg), "--beta", "4,6", "--workers", "2",
                                     "--out", str(out)], cwd=self.work, env=ENV, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            time.sleep(at)
            os.killpg(proc.pid, signal.SIGKILL)                  # the command and its workers
            proc.communicate()
            case = f"kill -9 of the sweep's process group at {at:.2f} s of {duration:.1f} s"
            r = attnpde("sweep", cfg, "--beta", "4,6", "--workers", "2", "--out", out, "--resume", cwd=self.work)
            k = kind(r)
            if k != "accepted":
                self.record("sweep", case, "lost or wrong" if k == "refused" else k,
                            "" if r is None else r.stderr.strip()[-300:])
                continue
            diff = [f"{name}: {d}" for name in ("faults_beta4.h5", "faults_beta6.h5")
                    for d in differences(out / name, ref_dir / name)]
            self.record("sweep", case, "ok" if not diff else "lost or wrong", ", ".join(diff))

    def space(self, trials: int) -> None:
        size = self.ref.stat().st_size
        for i in range(trials):
            path = self.work / f"s{i}.h5"
            limit = self.rng.randrange(size // 20, size)
            r = attnpde("run", self.cfg, "--out", path, "--quiet", cwd=self.work, limit=limit)
            case = f"file size limit {limit} of {size} bytes"
            k = kind(r)
            if k != "refused" or "file size limit" not in r.stderr:
                self.record("space", case, "lost or wrong" if k in ("refused", "accepted") else k,
                            "" if r is None else r.stderr.strip()[-300:])
                continue
            if not path.exists() or path.stat().st_size == 0:
                self.record("space", case, "ok", "refused before the archive held anything")
                continue
            info = attnpde("info", path, cwd=self.work)
            if kind(info) != "accepted":
                self.record("space", case + ": info", "lost or wrong", "" if info is None else info.stderr[-200:])
                continue
            self.resume_to_reference("space", case + ", then --resume", path)

    def table(self) -> str:
        groups = list(dict.fromkeys(r["group"] for r in self.rows))
        kinds = ("refused in one line / done right", "traceback", "hang", "crash", "lost or wrong")
        keys = ("ok", "traceback", "hang", "crash", "lost or wrong")
        lines = [f"| group | tried | {' | '.join(kinds)} |", "|---|---" + "|---" * len(kinds) + "|"]
        for g in groups + ["all"]:
            rows = [r for r in self.rows if g in ("all", r["group"])]
            counts = [sum(r["outcome"] == k for r in rows) for k in keys]
            other = len(rows) - sum(counts)
            counts[-1] += other                    # an outcome of no kind: counted against the archive
            lines.append(f"| {g} | {len(rows)} | " + " | ".join(map(str, counts)) + " |")
        return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small sample (the test suite's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="+", choices=("locks", "readonly", "tamper", "truncate", "flip", "kill", "sweep",
                                                  "space"))
    ap.add_argument("--json", help="write the trials as JSON here")
    ap.add_argument("--verbose", action="store_true", help="print the message of every trial")
    args = ap.parse_args(argv)
    n = (lambda full, quick: quick if args.quick else full)
    with tempfile.TemporaryDirectory(prefix="attnpde-faults-") as tmp:
        c = Campaign(Path(tmp), args.seed, args.quick)
        c.verbose = args.verbose
        print(f"reference run: {c.duration:.1f} s", flush=True)
        plan = [("locks", c.locks, ()), ("readonly", c.readonly, ()), ("tamper", c.tamper, ()),
                ("truncate", c.truncate, (n(20, 3),)), ("flip", c.flip, (n(60, 6),)), ("kill", c.kill, (n(20, 2),)),
                ("sweep", c.sweep, (n(10, 1),)), ("space", c.space, (n(20, 2),))]
        for name, fn, a in plan:
            if args.only and name not in args.only:
                continue
            print(f"[{name}]", flush=True)
            fn(*a)
        print()
        print(c.table())
        if args.json:
            Path(args.json).write_text(json.dumps(c.rows, indent=1))
        bad = [r for r in c.rows if r["outcome"] != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
