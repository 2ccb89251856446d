"""Inputs that cannot lead to a useful finished run are refused up front: one table, one test.

Every row is ``(id, kind, target, pattern)``:

* ``"api"``: ``target`` is a callable of no argument; it must raise ValueError (ConfigError is one) or
  TypeError whose message matches ``pattern``.
* ``"config"``: ``target`` is TOML text; :func:`solvers.app.config.parse_config` must raise ConfigError.
* ``"cli"``: ``target`` is ``(argv, config_text)`` or ``(argv, config_text, setup)``. The configuration
  is written to ``c.toml`` in a fresh directory (none when ``config_text`` is None), ``setup(dir)``
  adds what the row needs there (archives, directories), and ``attnpde argv...`` runs in that
  directory. It must exit with status 2 and write one line to stderr, ``attnpde: error: ...``
  matching ``pattern``, with no traceback; and the directory must be left exactly as it was: no
  archive (or plot directory) created, no file overwritten (also with --force).

No row starts a run: every refusal comes before the first step (each row well under 2 s).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import eval_legendre

from solvers import Model, Perceptron, simulate_particles, solve_pde
from solvers.model import VonMisesFisher
from solvers.app.config import parse_config

ROOT = Path(__file__).resolve().parents[1]

BASE = '[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n'
BASE3 = BASE.replace("d = 2", "d = 3")
GELU3 = '[model.perceptron]\nunits = 3\nactivation = "gelu"\nseed = 111\n'
PDE = "[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.5\n"
PARTICLES = "[particles]\nn = 200\nt_final = 1.0\nsave_every = 0.5\n"
# the survey's comparison runs (F18): both stages ran, then the comparison asked for 50-75 GiB
F18 = BASE3 + GELU3 + PDE + PARTICLES
# a validation study (both solvers, common snapshot times 0.5 and 1)
VALIDATE = BASE + PDE + PARTICLES
# PDE and particle snapshot times that meet only at t = 0
ONLY_T0 = BASE + "[pde]\ndegree = 16\nt_final = 1.0\n[particles]\nn = 100\nt_final = 0.7\nsave_every = 0.5\n"
SMALL = BASE + "[pde]\ndegree = 16\nt_final = 0.1\n"
# NUFFT sums on S^2 exist up to degree 200: beta = 1e6 needs 8847
NUFFT_SPHERE = BASE3 + '[particles]\nn = 10\nt_final = 0.1\nsum = "nufft"\n'


# --- set-ups of the command-line rows ------------------------------------------------------------------
def archive(name, status="running", config=SMALL):
    """An archive as ``attnpde run`` creates it, with the given status and no snapshot (nothing is run)."""
    def setup(d: Path) -> None:
        from solvers.app.archive import ArchiveWriter

        cfg = parse_config(config)
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        with ArchiveWriter(d / name, "create", config_text=config, name=Path(name).stem, model=cfg.model) as w:
            w.set_status(status)
    return setup


def directory(name):
    return lambda d: (d / name).mkdir(parents=True)


def both(*setups):
    def setup(d: Path) -> None:
        for s in setups:
            s(d)
    return setup


def fifo(name):
    return lambda d: os.mkfifo(d / name)


def _load(text: str):
    """load_config of ``text`` in a file (memory checks included)."""
    import tempfile
    from solvers.app.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.toml").write_text(text)
        return load_config(Path(tmp) / "c.toml")


def _particle_counts(text: str, ns: list):
    from solvers.app.validate import check_particle_counts
    check_particle_counts(parse_config(text), ns)


def _study_size(text: str, ns: list, seeds: int):
    from solvers.app.validate import check_study_size
    check_study_size(parse_config(text), ns, seeds)


def _zonal_multipliers(*args):
    from spectral.multipliers import zonal_multipliers
    return zonal_multipliers(*args)


def _validate_one():
    from solvers.app.validate import check_fit_time
    check_fit_time(parse_config(ONLY_T0), None)


def _sweep_list():
    from solvers.app.sweep import parse_list
    parse_list("1,x", "--beta")


REFUSALS = [
    # --- configuration files (parse_config) --------------------------------------------------------------
    ("moments-beyond-resolution", "config", F18 + "[compare]\nmoments = 100000\n",
     r"compare\.moments: must be <= 511, the largest degree the PDE resolves \(pde\.max_degree = 511, the default\)"),
    ("moments-beyond-circle-max-degree", "config",
     BASE + "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 64\n[particles]\nn = 10\nt_final = 1.0\n"
            "[compare]\nmoments = 64\n",
     r"compare\.moments: must be <= 63, .*pde\.max_degree = 64 Fourier modes"),
    ("mmd-beta-beyond-resolution", "config", F18 + "[compare]\nmmd_beta = 1e8\n",
     r"compare\.mmd_beta: 1e\+08 makes the MMD kernel .* above 511, .*: set mmd_beta <= 3550$"),
    ("mmd-beta-not-representable", "config", VALIDATE + "[compare]\nmmd_beta = 1e300\n",
     r"compare\.mmd_beta: 1e\+300 .* above 65535, .*: set mmd_beta <= 5\.82e\+07$"),
    ("degree-beyond-default-max-degree", "config",
     BASE3 + "[pde]\ndegree = 600\nt_final = 1.0\ncontinuation = \"none\"\n",
     r"pde\.degree: must be <= pde\.max_degree \(default 511 on S\^2\), got 600: lower degree, or set "
     r"max_degree >= 600"),
    # the handoff degree follows degree unless it is set (then the continuation's cap comes first)
    ("degree-beyond-default-max-degree-with-continuation", "config", BASE3 + "[pde]\ndegree = 600\nt_final = 1.0\n",
     r"pde\.degree: must be <= pde\.max_degree \(default 511 on S\^2\), got 600"),
    ("degree-beyond-handoff-degree", "config",
     BASE3 + "[pde]\ndegree = 200\nt_final = 1.0\nhandoff_degree = 127\nmax_degree = 255\n",
     r"pde\.degree: must be <= pde\.handoff_degree \(127 on S\^2: .*\), got 200: lower degree, raise "
     r"handoff_degree$"),
    ("max-degree-below-degree", "config", BASE + "[pde]\ndegree = 64\nt_final = 1.0\nmax_degree = 32\n",
     r"pde\.max_degree: must be >= pde\.degree = 64, got 32"),
    ("quadrature-n-on-sphere", "config", BASE3 + '[particles]\nn = 100\nt_final = 1.0\ninit = "quadrature"\n',
     r"particles\.n: init='quadrature' on S\^2 .* n must be 2 nlat\^2, got n = 100 \(nearest: \[72, 98, 128\]\)"),
    ("config-stop-unknown-cluster-rule", "config", BASE + PDE + PARTICLES + '[particles.stop]\nrule = "greedy"\n',
     r"particles\.stop\.rule: must be one of"),
    ("stop-true-not-a-table", "config", BASE + PARTICLES + "stop = true\n",
     r"particles\.stop: must be a table, got True: write it as \[particles\.stop\] \(an empty one takes the defaults\)$"),
    ("pde-true-not-a-table", "config", "pde = true\n" + BASE, r"^pde: must be a table, got True$"),
    ("compare-needs-both-solvers", "config", BASE + PDE + "[compare]\nmoments = 4\n",
     r"compare: needs both a \[pde\] and a \[particles\] table"),
    # the comparison is made at the common snapshot times: it would measure the initial data alone
    ("compare-at-t0-only", "config", ONLY_T0 + "[compare]\n",
     r"compare: the PDE \(no save_every: t = 0 and t_final = 1\) and the particles \(save_every = 0\.5, "
     r"t_final = 0\.7\) share no snapshot time after t = 0, .*: set pde\.save_every and particles\.save_every to "
     r"the same value, at most half the shorter t_final \(0\.7\)$"),
    # one common time after t = 0 is one number without a trend: the 0.25 against 0.3 met at t = 1 only
    ("compare-at-one-time-only", "config",
     BASE + "[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.25\n[particles]\nn = 100\nt_final = 1.0\n"
            "save_every = 0.3\n[compare]\n",
     r"^compare: the PDE \(save_every = 0\.25, t_final = 1\) and the particles \(save_every = 0\.3, t_final = 1\) "
     r"share one snapshot time after t = 0 \(t = 1\), and the comparison is made at common times, at least two after "
     r"t = 0: set pde\.save_every and particles\.save_every to the same value, at most half the shorter t_final \(1\)$"),
    ("compare-at-t-final-only", "config", BASE + PDE + "[particles]\nn = 10\nt_final = 1.0\n[compare]\n",
     r"the particles \(no save_every: t = 0 and t_final = 1\) share one snapshot time after t = 0 \(t = 1\)"),
    ("compare-at-t0-only-stop-rule", "config", BASE + PDE + "[particles]\nn = 100\nt_final = 2.0\ndt = 0.03\n"
     "[particles.stop]\nwindow = 3\n[compare]\n",
     r"particles \(save_every = 0\.3 \(the default with a stop rule\), t_final = 2\) share no snapshot time"),

    # --- attnpde run --------------------------------------------------------------------------------------
    ("run-compare-at-t0-only", "cli", (["run", "c.toml"], BASE + "[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.5\n"
                                       "[particles]\nn = 10\nt_final = 2.0\nsave_every = 0.3\n[compare]\n"),
     r"^attnpde: error: c\.toml: compare: the PDE \(save_every = 0\.5, t_final = 1\) and the particles"),
    ("run-moments-beyond-resolution", "cli", (["run", "c.toml"], F18 + "[compare]\nmoments = 100000\n"),
     r"^attnpde: error: c\.toml: compare\.moments: must be <= 511"),
    ("run-mmd-beta-force-keeps-archive", "cli",
     (["run", "c.toml", "--force"], F18 + "[compare]\nmmd_beta = 1e8\n", archive("c.h5", "finished")),
     r"^attnpde: error: c\.toml: compare\.mmd_beta: 1e\+08 .*set mmd_beta <= 3550$"),
    ("run-degree-beyond-default-max-degree", "cli",
     (["run", "c.toml"], BASE3 + "[pde]\ndegree = 600\nt_final = 1.0\ncontinuation = \"none\"\n"),
     r"^attnpde: error: c\.toml: pde\.degree: must be <= pde\.max_degree \(default 511 on S\^2\)"),
    ("run-degree-beyond-handoff-degree", "cli",
     (["run", "c.toml"], BASE3 + "[pde]\ndegree = 4096\nt_final = 1.0\nhandoff_degree = 127\n"),
     r"^attnpde: error: c\.toml: pde\.degree: must be <= pde\.handoff_degree \(127 on S\^2"),
    # with noise the continuation's own refusal, not its cap (raising handoff_degree would not help)
    ("run-noisy-lagrangian-beyond-handoff-degree", "cli",
     (["run", "c.toml"], BASE3.replace('flow = "ascent"', 'flow = "ascent"\nnoise = 0.3')
      + '[pde]\ndegree = 200\nt_final = 1.0\ncontinuation = "lagrangian"\n'),
     r"^attnpde: error: .*continuation='lagrangian' carries the density .* use continuation='none'"),
    ("run-out-is-the-configuration", "cli", (["run", "c.toml", "--out", "c.toml", "--force"], SMALL),
     r"^attnpde: error: --out c\.toml: is the configuration itself; give the archive another path \(e\.g\. c\.h5\)$"),
    ("run-out-is-the-configuration-resume", "cli", (["run", "c.toml", "--out", "./c.toml", "--resume"], SMALL),
     r"^attnpde: error: --out c\.toml: is the configuration itself"),
    ("run-out-is-a-directory", "cli", (["run", "c.toml", "--out", "somedir"], SMALL, directory("somedir")),
     r"^attnpde: error: --out somedir: is a directory; give a file path \(e\.g\. somedir/c\.h5\)$"),
    ("run-out-is-a-directory-force", "cli", (["run", "c.toml", "--out", "somedir", "--force"], SMALL,
                                             directory("somedir")),
     r"^attnpde: error: --out somedir: is a directory; give a file path"),
    ("run-out-under-proc", "cli", (["run", "c.toml", "--out", "/proc/nope.h5"], SMALL),
     r"^attnpde: error: --out /proc/nope\.h5: cannot be created: no file can be written in /proc"),
    ("run-out-under-a-file", "cli", (["run", "c.toml", "--out", "c.toml/x/a.h5"], SMALL),
     r"^attnpde: error: --out c\.toml/x/a\.h5: cannot be created: c\.toml is not a directory$"),
    ("run-archive-as-config", "cli", (["run", "sw.h5"], None, archive("sw.h5")),
     r"^attnpde: error: sw\.h5: not a UTF-8 TOML file \(an archive\? give the \.toml configuration\)$"),
    ("run-existing-archive-without-force", "cli", (["run", "c.toml"], SMALL, archive("c.h5", "finished")),
     r"^attnpde: error: c\.h5 exists; use --force to overwrite it or --resume to continue it$"),
    ("run-resume-with-force", "cli", (["run", "c.toml", "--resume", "--force"], SMALL, archive("c.h5")),
     r"^attnpde: error: --resume and --force exclude each other$"),
    ("run-resume-finished", "cli", (["run", "c.toml", "--resume"], SMALL, archive("c.h5", "finished")),
     r"^attnpde: error: c\.h5: the run is already finished; nothing to resume"),

    # --- attnpde plot -------------------------------------------------------------------------------------
    ("plot-without-snapshot", "cli", (["plot", "c.h5"], None, archive("c.h5")),
     r"^attnpde: error: c\.h5: no snapshot recorded \(status running\): nothing to plot$"),
    ("plot-foreign-file", "cli", (["plot", "c.toml"], SMALL), r"^attnpde: error: c\.toml: not a readable HDF5 file"),

    # --- attnpde validate ---------------------------------------------------------------------------------
    ("validate-at-negative", "cli", (["validate", "c.toml", "--n", "10,20", "--at", "-5"], VALIDATE),
     r"^attnpde: error: --at -5: the time of the fit must be a finite number in \[0, 1\]"),
    ("validate-at-nan", "cli", (["validate", "c.toml", "--n", "10,20", "--at", "nan"], VALIDATE),
     r"^attnpde: error: --at nan: the time of the fit must be a finite number"),
    ("validate-at-after-particles", "cli", (["validate", "c.toml", "--n", "10", "--at", "0.8"],
                                            VALIDATE.replace("n = 200\nt_final = 1.0", "n = 200\nt_final = 0.5")),
     r"^attnpde: error: --at 0\.8: .* in \[0, 0\.5\] \(pde\.t_final = 1, particles\.t_final = 0\.5\)"),
    ("validate-only-t0-in-common", "cli", (["validate", "c.toml", "--n", "10,20"], ONLY_T0),
     r"^attnpde: error: c\.toml: the PDE \(pde\.t_final = 1, pde\.save_every unset\) and the particles "
     r"\(particles\.t_final = 0\.7, particles\.save_every = 0\.5\) share no snapshot time after t = 0"),
    ("validate-quadrature-n-on-sphere", "cli",
     (["validate", "c.toml", "--n", "98,100"], F18.replace("n = 200", 'n = 98\ninit = "quadrature"')),
     r"^attnpde: error: --n 100: init='quadrature' on S\^2 .* n must be 2 nlat\^2, got n = 100"),
    ("validate-n-beyond-memory", "cli",
     (["validate", "c.toml", "--n", "10,100000000000"],
      BASE + PDE + PARTICLES.replace("save_every = 0.5", "save_every = 0.001")),
     r"^attnpde: error: c\.toml: \[particles\] with --n 100000000000: the run would need about .* GiB"),
    ("validate-stopping-rule", "cli", (["validate", "c.toml", "--n", "10"], VALIDATE + "[particles.stop]\nwindow = 5\n"),
     r"^attnpde: error: c\.toml: particles\.stop: validate compares every N at the same times"),
    ("validate-n-not-integer", "cli", (["validate", "c.toml", "--n", "10.5"], VALIDATE),
     r"^attnpde: error: --n: particle counts must be integers >= 1$"),
    ("validate-out-is-the-configuration", "cli", (["validate", "c.toml", "--n", "10", "--out", "c.toml", "--force"],
                                                  VALIDATE),
     r"^attnpde: error: --out c\.toml: is the configuration itself"),
    ("validate-out-is-a-directory", "cli", (["validate", "c.toml", "--n", "10", "--out", "d", "--force"], VALIDATE,
                                            directory("d")),
     r"^attnpde: error: --out d: is a directory; give a file path"),
    ("validate-archive-as-config", "cli", (["validate", "sw.h5", "--n", "10"], None, archive("sw.h5")),
     r"^attnpde: error: sw\.h5: not a UTF-8 TOML file"),

    # --- attnpde sweep ------------------------------------------------------------------------------------
    ("sweep-same-beta-twice", "cli", (["sweep", "c.toml", "--beta", "1,1"], SMALL),
     r"^attnpde: error: --beta: 1\.0 is given twice \(c/c_beta1\.h5: .*\); give distinct values$"),
    ("sweep-betas-with-one-name", "cli", (["sweep", "c.toml", "--beta", "2,2.0000001"], SMALL),
     r"^attnpde: error: --beta: 2\.0000001 and 2\.0 give the same archive name \(c/c_beta2\.h5"),
    ("run-nufft-sums-on-S3", "cli",
     (["run", "c.toml"], BASE.replace("d = 2", "d = 4") + '[particles]\nn = 10\nt_final = 0.1\nsum = "nufft"\n'),
     r"^attnpde: error: c\.toml: \[particles\]: nufft sums exist on S\^1 and S\^2 only \(d = 2, 3\), not d = 4: "
     r"use sum='direct'"),
    ("run-nufft-sums-on-the-sphere-beyond-their-degree", "cli",
     (["run", "c.toml"], BASE3.replace("beta = 1.0", "beta = 1e6")
      + '[particles]\nn = 10\nt_final = 0.1\nsum = "nufft"\n'),
     r"^attnpde: error: c\.toml: \[particles\]: nufft sums on S\^2 need degree L = \d+ at beta = 1e\+06, above the "
     r"supported 200; use method='direct'$"),
    ("run-fast-sums-on-S3", "cli",
     (["run", "c.toml"], BASE.replace("d = 2", "d = 4") + '[particles]\nn = 10\nt_final = 0.1\nsum = "fast"\n'),
     r"^attnpde: error: c\.toml: \[particles\]: fast sums exist on S\^1 and S\^2 only \(d = 2, 3\), not d = 4: "
     r"use sum='direct' or 'auto'$"),
    ("sweep-member-invalid-for-its-beta", "cli", (["sweep", "c.toml", "--beta", "1,1e6"], NUFFT_SPHERE),
     r"^attnpde: error: c\.toml \(beta = 1e\+06\): \[particles\]: nufft sums on S\^2 need degree"),
    ("sweep-resume-finished-other-config", "cli",
     (["sweep", "c.toml", "--beta", "1", "--resume"], SMALL,
      archive("c/c_beta1.h5", "finished", SMALL.replace("t_final = 0.1", "t_final = 0.2"))),
     r"^attnpde: error: c/c_beta1\.h5: is finished, but was made with another configuration than "
     r"c\.toml \(beta = 1\); use --force"),
    ("sweep-resume-with-force", "cli", (["sweep", "c.toml", "--beta", "1", "--resume", "--force"], SMALL),
     r"^attnpde: error: --resume and --force exclude each other$"),
    ("sweep-out-is-a-file", "cli", (["sweep", "c.toml", "--beta", "1", "--out", "c.toml"], SMALL),
     r"^attnpde: error: --out c\.toml: exists and is not a directory; give a directory for the archives$"),
    ("sweep-out-under-proc", "cli", (["sweep", "c.toml", "--beta", "1", "--out", "/proc/sw"], SMALL),
     r"^attnpde: error: --out /proc/sw: cannot be created"),
    ("sweep-archive-as-config", "cli", (["sweep", "sw.h5", "--beta", "1"], None, archive("sw.h5")),
     r"^attnpde: error: sw\.h5: not a UTF-8 TOML file"),
    ("sweep-existing-members", "cli", (["sweep", "c.toml", "--beta", "1"], SMALL, archive("c/c_beta1.h5")),
     r"^attnpde: error: c/c_beta1\.h5 exists; use --force to overwrite or --resume to continue$"),
    ("sweep-unfinished-member", "cli", (["sweep", "c.toml", "--beta", "1"], SMALL, archive("c/c_beta1.h5.part")),
     r"^attnpde: error: c/c_beta1\.h5\.part: an unfinished member of an earlier sweep; use --resume to continue "
     r"it or --force to start it again$"),
    ("sweep-workers-with-scheduler", "cli",
     (["sweep", "c.toml", "--beta", "1", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"], SMALL),
     r"^attnpde: error: --workers sets the local processes; with --scheduler .*: give one of the two$"),
    ("validate-workers-with-scheduler", "cli",
     (["validate", "c.toml", "--n", "10", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"], VALIDATE),
     r"^attnpde: error: --workers sets the local processes; with --scheduler .*: give one of the two$"),

    # --- command-line helpers (API) ----------------------------------------------------------------------
    ("validate-only-t0-api", "api", _validate_one, r"share no snapshot time after t = 0"),
    ("sweep-list-not-a-number", "api", _sweep_list, r"^--beta: 'x' is not a number"),

    # --- solver entry points (API) ------------------------------------------------------------------------
    ("pde-initial-coefficients-negative", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 8, initial=np.ones(5, complex)),
     r"^initial data refused before any step: min rho = -2\.000e\+00 < -0\.001 max rho .* 'positivity'\); give "
     r"the coefficients of a density >= 0"),
    ("pde-initial-finer-than-resolution", "api",
     lambda: solve_pde(Model(3, 1.0, "ascent"), 0.1, 16, max_degree=16, continuation="none",
                       initial=lambda x: 1 + 0.5 * eval_legendre(40, x[:, 2])),
     r"not resolved at max_degree = 16 \(spectral tail or miss at check points 5\.\d+e-02 > tail_max"),
    ("pde-initial-unresolved-at-handoff", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 64, handoff_degree=64,
                       initial=lambda x: np.where(x[:, 0] > 0, 1.9, 0.1)),
     r"not resolved at the handoff degree 64 .* no resolved state to start from; raise handoff_degree"),
    ("pde-sa-log-psi-at-t0", "api",
     lambda: solve_pde(Model(2, 200.0, "ascent", attention="normalized"), 1.0, 256,
                       initial=lambda x: np.exp(60 * (np.abs(x[:, 0]) - 1))),
     r"^initial data refused before any step: SA: min Psi / \|Psi series\| = .* 'resolution'"),
    ("pde-tail-below-round-off", "api", lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 16, tail_tol=1e-16,
                                                         tail_max=1e-16),
     r"option tail_tol = 1e-16 is below the round-off floor 1e-14"),
    ("pde-positivity-below-round-off", "api", lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 16,
                                                               positivity_tol=1e-300),
     r"option positivity_tol = 1e-300 is below the round-off floor"),
    ("pde-max-steps-below-snapshots", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 32, save_every=0.01, max_steps=10),
     r"^max_steps = 10 cannot reach t_final = 1: the 100 snapshot times left each need a step"),
    ("pde-cfl-beyond-max-steps", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1e200, seed=111)),
                       1.0, 32, max_steps=100000),
     r"max \|v\| = 9\.63e\+199 limits the step .* needs more than max_steps = 100000 steps"),
    ("pde-snapshots-beyond-memory", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent"), 10.0, 32, save_every=1e-6, max_steps=10 ** 9),
     r"^the run would need about .* GiB \(10000002 snapshots kept and stacked .*\), more than 80% of this "
     r"machine's"),
    ("pde-sphere-output-grid-beyond-memory", "api",
     lambda: solve_pde(Model(3, 1.0, "ascent"), 1.0, 16, output_points=20000),
     r"output grid 17\.9 GiB\), more than 80%"),
    ("pde-lagrangian-with-noise", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent", noise=0.1), 1.0, 16, continuation="lagrangian"),
     r"continuation='lagrangian' carries the density along the characteristics .* use continuation='none'"),
    ("pde-degree-above-handoff", "api", lambda: solve_pde(Model(3, 1.0, "ascent"), 1.0, 200, max_degree=255, handoff_degree=127),
     r"^degree 200 exceeds handoff_degree 127"),
    ("pde-handoff-after-end", "api", lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 16, handoff_at=2.0),
     r"^handoff_at = 2\.0 is not before t_final = 1\.0"),
    ("pde-continuation-options-without-it", "api",
     lambda: solve_pde(Model(2, 1.0, "ascent"), 1.0, 16, continuation="none", nodes=1000),
     r"are options of the Lagrangian continuation, which continuation='none' turns off"),
    ("pde-restart-at-the-end", "api", lambda: _restart(t_final=1.0),
     r"^the restart state is at t = 1 >= t_final = 1: nothing to run"),
    ("pde-restart-other-settings", "api", lambda: _restart(t_final=2.0, save_every=0.3),
     r"belongs to a run with other settings \(save_every: 0\.5 -> 0\.3\)"),
    ("pde-restart-other-threads", "api", lambda: _restart(t_final=2.0, threads=2),
     r"belongs to a run with other settings \(option threads: 1 -> 2\)"),
    ("particles-snapshots-beyond-memory", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent"), n=10 ** 6, t_final=10.0, integrator="euler", dt=0.01,
                                save_every=0.01),
     r"^the run would need about 37\.6 GiB \(1002 snapshots of 1000000 particles kept and stacked 37\.3 GiB, "
     r"working arrays 0\.268 GiB\)"),
    # no snapshots to count (a stopping rule, no t_final): the working arrays, 18 of N x d doubles
    ("particles-working-arrays-beyond-memory", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent"), n=10 ** 8, stop=True),
     r"^the run would need about 26\.8 GiB \(working arrays 26\.8 GiB\), more than 80% of this machine's 16 GiB; "
     r"lower n$"),
    ("particles-steps-overflow", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent"), n=10, t_final=1e300, dt=1e-300),
     r"^t_final / dt = inf steps of the fixed-step integrator 'rk4' exceed max_steps"),
    ("particles-steps-beyond-max-steps", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent"), n=100, t_final=1.0, dt=1e-4, max_steps=1000),
     r"^t_final / dt = 10000 steps of the fixed-step integrator 'rk4' exceed max_steps = 1000"),
    ("particles-stop-unknown-cluster-rule", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent"), n=100, stop={"rule": "greedy"}),
     r"^stop: rule must be one of \('linkage', 'paper'\), got 'greedy'$"),
    ("particles-stop-rule-with-noise", "api",
     lambda: simulate_particles(Model(2, 5.0, "ascent", noise=0.01), n=100, stop=True),
     r"^a stopping rule with noise > 0 needs t_final"),
    ("particles-too-concentrated-to-sample", "api",
     lambda: simulate_particles(Model(2, 1.0, "ascent"), n=100000, t_final=1.0,
                                density=lambda x: np.exp(1e8 * (x[:, 0] - 1))),
     r"too concentrated for rejection sampling: about 2\.9e\+09 proposals for n = 100000"),
    ("pde-run-refused-before-its-archive", "cli",
     (["run", "c.toml"], BASE + "[pde]\ndegree = 32\nt_final = 10.0\nsave_every = 1e-9\nmax_steps = 1000000000000\n"),
     r"^attnpde: error: c\.toml: \[pde\]: the run would need about"),
    ("particles-run-refused-before-its-archive", "cli",
     (["run", "c.toml", "--force"], BASE + '[particles]\nn = 1000000000000\nt_final = 10.0\nintegrator = "euler"\n'
      "dt = 0.01\nsave_every = 0.01\n", archive("c.h5", "finished")),
     r"^attnpde: error: c\.toml: \[particles\]: the run would need about 3\.76e\+07 GiB"),

    # --- limits before work: sizes, exponents, names, the file itself ------------------------------------
    # beta beyond the range of the multipliers ive(k, beta) (AMOS: NaN above (2^31 - 1)/2); was OverflowError
    ("beta-beyond-ive-range", "config", BASE.replace("beta = 1.0", "beta = 1e308") + PDE,
     r"^model\.beta: must be a number >= 0 and <= 1e\+09 \(the kernel's multipliers ive\(k, beta\) are NaN above "
     r"\(2\^31 - 1\)/2 = 1\.07e9.*\), got 1e\+308$"),
    # the snapshot count t_final / save_every (was OverflowError) and the fixed-step count t_final / dt
    ("snapshot-count-beyond-2^53", "config", BASE + "[pde]\ndegree = 16\nt_final = 1e300\nsave_every = 1e-300\n",
     r"^pde\.save_every: pde\.t_final / save_every = inf snapshots, above 2\^53 = 9\.01e\+15 \(the integers a "
     r"double counts exactly\): raise save_every or lower t_final$"),
    ("particle-steps-beyond-2^53", "config", BASE + "[particles]\nn = 10\nt_final = 1.0\ndt = 1e-300\n",
     r"^particles\.dt: particles\.t_final / dt = 1e\+300 steps, above 2\^53"),
    ("particle-snapshots-beyond-2^53", "config", BASE + "[particles]\nn = 10\nt_final = 1e200\nsave_every = 1e-200\n",
     r"^particles\.save_every: particles\.t_final / save_every = inf snapshots"),
    ("kappa-beyond-the-sampler", "config",
     BASE + '[initial]\nkind = "von_mises"\nmu = [1.0, 0.0]\nkappa = 1e308\n' + PARTICLES,
     r"^initial\.kappa: must be a number > 0 and <= 1e\+300 \(Wood's sampler keeps the digits of b"),
    ("explicit-bias-beyond-range", "config",
     BASE + "[model.perceptron]\na = [[1.0, 0.0]]\nc = [1.0]\nb = [1e200]\n" + PDE,
     r"^model\.perceptron\.b: every bias must be within \+-1e\+150 \(the activations' primitives grow as z\^2/2"),
    ("bias-scale-beyond-range", "config", BASE + "[model.perceptron]\nunits = 2\nbias_scale = 1e300\n" + PDE,
     r"^model\.perceptron\.bias_scale: must be a number >= 0 and <= 1e\+149 \(ten standard deviations"),
    ("weight-scale-beyond-range", "config", BASE + "[model.perceptron]\nunits = 2\nscale = 1e308\n" + PDE,
     r"^model\.perceptron\.scale: must be a number > 0 and <= 1e\+300 \(the weights scale N\(0, 1\) stay finite\)"),
    ("degree-beyond-2^20", "config", BASE + "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 4294967296\n",
     r"^pde\.max_degree: must be an integer >= 4 and <= 1048576 \(2\^20, the most degrees the package computes"),
    ("integer-beyond-64-bits", "config", BASE + "[particles]\nn = 18446744073709551616\nt_final = 1.0\n",
     r"^particles\.n: must be an integer >= 1, got one beyond TOML's 64 bits$"),
    ("zonal-degree-beyond-the-pde", "config",
     BASE + '[initial]\nkind = "zonal_harmonic"\ndegree = 100000\namplitude = 0.5\n'
            "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 64\n",
     r"^initial\.degree: must be <= 63, the largest degree the PDE resolves \(pde\.max_degree = 64\), got 100000$"),
    # a random perceptron's weights are estimated before they are drawn (80% of 16 GiB here)
    ("perceptron-weights-beyond-memory", "config", BASE + "[model.perceptron]\nunits = 10000000000\n" + PARTICLES,
     r"^model\.perceptron\.units: would need about 1\.34e\+03 GiB \(the weights of 10000000000 units in R\^2 "
     r"1\.34e\+03 GiB\), "
     r"more than 80% of this machine's 16 GiB; lower units$"),
    # names and text kept in the archive (HDF5 strings end at a NUL) and in file names (a sweep's members)
    ("name-with-nul", "config", '[run]\nname = "a\\u0000b"\n' + SMALL,
     r"^run\.name: contains NUL, not allowed in a name; got 'a\\x00b'$"),
    ("name-with-control-character", "config", '[run]\nname = "bell\\u0007"\n' + SMALL,
     r"^run\.name: contains the control character U\+0007, not allowed in a name"),
    ("name-with-line-break", "config", '[run]\nname = "two\\nlines"\n' + SMALL,
     r"^run\.name: contains the control character U\+000A, not allowed in a name"),
    ("name-with-slash", "config", '[run]\nname = "../elsewhere"\n' + SMALL,
     r"^run\.name: must not contain '/' \(a sweep names its archives <name>_beta<beta>\.h5 in its directory\)"),
    ("name-too-long", "config", '[run]\nname = "' + "é" * 101 + '"\n' + SMALL,
     r"^run\.name: is 202 bytes long in UTF-8, above 200: a sweep names its archives <name>_beta<beta>\.h5\.part"),
    ("description-with-nul", "config", '[run]\ndescription = "a\\u0000"\n' + SMALL,
     r"^run\.description: contains NUL, not allowed in text kept in the archive's attributes"),
    # the parser's own failures in one line (was a 3000-line RecursionError traceback)
    ("toml-nested-too-deep", "config", SMALL + "x = " + "[" * 5000 + "]" * 5000 + "\n",
     r"^not valid TOML here: arrays or inline tables nested too deep for the parser \(Python's recursion limit"),
    ("toml-inline-tables-nested-too-deep", "config", SMALL + "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
     r"^not valid TOML here: arrays or inline tables nested too deep"),
    ("toml-not-valid", "config", SMALL + "x = [1,\n", r"^not valid TOML: .*\(at end of document\)$"),
    ("unknown-key-with-control-characters", "config", SMALL + '"a\\nb" = 1\n',
     r'^pde\."a\\nb": unknown key; allowed in \[pde\]: '),
    # the reason of beta's largest value (the Bessel functions' range) is not given for a negative one
    ("negative-beta-without-the-largest-ones-reason", "config",
     '[model]\nd = 2\nbeta = -1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 1.0\n',
     r"^model\.beta: must be a number >= 0 and <= 1e\+09, got -1\.0$"),
    ("long-value-shortened", "config", BASE + "[pde]\ndegree = [" + "1, " * 100000 + "1]\nt_final = 1.0\n",
     r"^pde\.degree: must be an integer >= 4 and <= 1048576 \(2\^20.*\), got \[1, 1, 1, 1, 1, 1, 1, 1, \.\.\.\] \(list\)$"),
    # the comparison's radii are angles between unit vectors: refused up front, not after both solvers ran
    ("compare-atom-radius-below-round-off", "config", VALIDATE + "[compare]\natom_radius = 5e-324\n",
     r"^compare\.atom_radius: makes the atom radius 4\.94e-324 rad, below 1e-15 \(unit vectors are known to about "
     r"2\.2e-16 per entry"),
    ("compare-cluster-scale-below-round-off", "config", VALIDATE + "[compare]\ncluster_scale = 1e-300\n",
     r"^compare\.cluster_scale: makes the atom radius 1e-300 rad, below 1e-15"),
    ("stop-scale-below-round-off", "config", BASE + "[particles]\nn = 10\nt_final = 1.0\n[particles.stop]\n"
                                                   "scale = 5e-21\n",
     r"^particles\.stop\.scale: makes the cluster radius scale / sqrt\(beta\) 5e-21 rad, below 1e-15"),
    # infinity has one spelling in each language, named in the refusal of any other
    ("t-final-infinity-as-a-string", "config", BASE + '[pde]\ndegree = 16\nt_final = "infinity"\n',
     r"^pde\.t_final: must be a number > 0 or infinity \(until the terminal state is certified; a bare inf in TOML, "
     r"math\.inf in Python\), got 'infinity' \(a string\)$"),
    ("t-final-minus-infinity", "config", BASE + "[pde]\ndegree = 16\nt_final = -inf\n",
     r"^pde\.t_final: must be a number > 0 or infinity \(until the terminal state is certified; a bare inf in TOML, "
     r"math\.inf in Python\), got -inf$"),
    ("t-final-quoted-number", "config", BASE + '[pde]\ndegree = 16\nt_final = "10"\n',
     r"^pde\.t_final: must be a number > 0 or infinity .*, got '10' \(a string: no quotes\)$"),
    ("particles-t-final-infinity-as-a-string", "config", BASE + '[particles]\nn = 10\nt_final = "inf"\n',
     r"^particles\.t_final: must be a number > 0, got 'inf' \(str\); infinity is not allowed here$"),
    # a configuration of the other command names the command that fits
    ("branch-configuration-given-to-run", "cli", (["run", "c.toml"], BASE + "[branch]\nmode = 1\n"),
     r"c\.toml: branch: is the table of an `attnpde branch` configuration .*: run it with `attnpde branch CONFIG`"),
    ("run-configuration-given-to-branch", "cli", (["branch", "c.toml"], BASE + PDE),
     r"c\.toml: pde: is a table of an `attnpde run` configuration .*: run it with `attnpde run CONFIG`"),
    ("merge-tol-below-round-off", "config", SMALL + "merge_tol = 1e-300\n",
     r"^pde\.merge_tol: must be a number >= 1e-15 \(unit vectors are known to about 2\.2e-16 per entry"),

    ("model-beta-beyond-ive-range", "api", lambda: Model(2, 2e9, "ascent"),
     r"^Model: beta must be <= 1e\+09 \(the kernel's multipliers ive\(k, beta\) are NaN above"),
    ("multipliers-beyond-ive-range", "api", lambda: _zonal_multipliers(2e9, 2, 4), r"^beta must be <= 1e\+09"),
    ("von-mises-kappa-beyond-the-sampler", "api", lambda: VonMisesFisher([1.0, 0.0], 1e308),
     r"^VonMisesFisher: kappa must be a finite number >= 0 and <= 1e\+300"),
    ("perceptron-bias-beyond-range", "api", lambda: Perceptron([[1.0, 0.0]], c=[1.0], b=[-1e151]),
     r"^Perceptron: every bias must be within \+-1e\+150 .*got b_0 = -1e\+151$"),
    ("perceptron-scale-beyond-range", "api", lambda: Perceptron.random(2, 2, "relu", 1e308),
     r"^Perceptron\.random: scale must be finite, > 0 and <= 1e\+300"),
    # the units = 100000: 100000 x 8192 points (the continuation's nodes, twice), 5 arrays for gelu
    ("perceptron-units-beyond-memory", "api",
     lambda: _load(BASE + '[model.perceptron]\nunits = 100000\nactivation = "gelu"\n' + PDE),
     r"^model\.perceptron\.units: would need about 30\.5 GiB \(the perceptron's 100000 units at the continuation's "
     r"4096 nodes, twice for its error estimate \(5 arrays of units x points for gelu\) 30\.5 GiB\), more than 80% "
     r"of this machine's 16 GiB; lower units$"),
    ("pde-transforms-beyond-memory", "api",
     lambda: _load(BASE3 + "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 8191\ncontinuation = \"none\"\n"),
     r"^pde\.max_degree: would need about 57\.6 GiB \(the PDE's transforms at max_degree = 8191 57\.6 GiB\), more "
     r"than 80% of this machine's 16 GiB; lower max_degree$"),
    ("pde-handoff-transforms-beyond-memory", "api",
     lambda: _load(BASE3 + "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 10000\nhandoff_degree = 8191\n"),
     r"^pde\.handoff_degree: would need about 57\.6 GiB \(the PDE's transforms at handoff_degree = 8191"),
    ("validate-perceptron-at-n-beyond-memory", "api",
     lambda: _particle_counts(BASE + "[model.perceptron]\nunits = 1000\n" + PDE + PARTICLES, [10, 10 ** 6]),
     r"^--n 1000000: would need about 14\.9 GiB \(the perceptron's 1000 units at 1000000 particles"),
    ("validate-seeds-beyond-memory-api", "api", lambda: _study_size(VALIDATE, [10, 100], 10 ** 9),
     r"^--seeds 1000000000: the study would need about .* GiB \(2000000000 particle runs \(2 N x 1000000000 seeds\)"),

    ("run-beta-1e308", "cli", (["run", "c.toml"], BASE.replace("beta = 1.0", "beta = 1e308") + SMALL[len(BASE):]),
     r"^attnpde: error: c\.toml: model\.beta: must be a number >= 0 and <= 1e\+09"),
    ("run-snapshots-1e300-by-1e-300", "cli",
     (["run", "c.toml"], BASE + "[pde]\ndegree = 16\nt_final = 1e300\nsave_every = 1e-300\n"),
     r"^attnpde: error: c\.toml: pde\.save_every: pde\.t_final / save_every = inf snapshots, above 2\^53"),
    # refused before the archive: no stub is left to block a rerun (the row checks the directory)
    ("run-nul-in-name-leaves-no-archive", "cli", (["run", "c.toml"], '[run]\nname = "a\\u0000b"\n' + SMALL),
     r"^attnpde: error: c\.toml: run\.name: contains NUL, not allowed in a name"),
    ("run-toml-nested-5000-deep", "cli", (["run", "c.toml"], SMALL + "x = " + "[" * 5000 + "]" * 5000 + "\n"),
     r"^attnpde: error: c\.toml: not valid TOML here: arrays or inline tables nested too deep"),
    # 100000 units on the sphere's grid of max_degree 511 (768 x 1536 points): 4.4 TiB with gelu, beyond any machine
    ("run-perceptron-units-beyond-memory", "cli",
     (["run", "c.toml"], BASE3 + '[model.perceptron]\nunits = 100000\nactivation = "gelu"\n'
      '[pde]\ndegree = 16\nt_final = 1.0\ncontinuation = "none"\n'),
     r"^attnpde: error: c\.toml: model\.perceptron\.units: would need about 4\.39e\+03 GiB \(the perceptron's 100000 "
     r"units at the PDE's grid at max_degree = 511 \(5 arrays of units x points for gelu\)"),
    ("validate-seeds-beyond-memory", "cli", (["validate", "c.toml", "--n", "10", "--seeds", "1000000000"], VALIDATE),
     r"^attnpde: error: --seeds 1000000000: the study would need about 4\.1.e\+03 GiB \(1000000000 particle runs"),
    ("validate-workers-beyond-memory", "cli", (["validate", "c.toml", "--n", "10", "--workers", "1000000000000"],
                                               VALIDATE),
     r"^attnpde: error: --workers 1000000000000: would need about 9\.77e\+10 GiB \(1000000000000 worker processes"),
    ("sweep-workers-beyond-memory", "cli", (["sweep", "c.toml", "--beta", "1", "--workers", "1000000000000"], SMALL),
     r"^attnpde: error: --workers 1000000000000: would need about"),
    ("info-fifo", "cli", (["info", "a.h5"], None, fifo("a.h5")),
     r"^attnpde: error: a\.h5: is a FIFO \(named pipe\); give an archive \(\.h5\)$"),
    ("plot-dev-zero", "cli", (["plot", "/dev/zero"], None),
     r"^attnpde: error: /dev/zero: is a character device; give an archive \(\.h5\)$"),
    ("run-fifo", "cli", (["run", "f.toml"], None, fifo("f.toml")),
     r"^attnpde: error: f\.toml: is a FIFO \(named pipe\); give a TOML configuration file$"),
    ("branch-fifo", "cli", (["branch", "f.toml"], None, fifo("f.toml")),
     r"^attnpde: error: f\.toml: is a FIFO \(named pipe\); give a TOML configuration file$"),
    ("sweep-directory-as-config", "cli", (["sweep", "d.toml", "--beta", "1"], None, directory("d.toml")),
     r"^attnpde: error: d\.toml: is a directory; give a TOML configuration file$"),
    ("validate-dev-zero", "cli", (["validate", "/dev/zero", "--n", "10"], None),
     r"^attnpde: error: /dev/zero: is a character device; give a TOML configuration file$"),
    ("run-config-above-1-MiB", "cli", (["run", "c.toml"], SMALL + "#" + "x" * (1 << 20) + "\n"),
     r"^attnpde: error: c\.toml: is 1048\d\d\d bytes, above the 1048576 \(1 MiB\) a configuration may have"),
]


def _restart(**kw):
    m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=111))
    r = solve_pde(m, 1.0, 32, save_every=0.5)
    return solve_pde(m, kw.pop("t_final"), 32, save_every=kw.pop("save_every", 0.5), restart=r.restart, **kw)


def _tree(d: Path) -> dict:
    """Every file (its bytes) and directory (None) under ``d``."""
    return {p.relative_to(d): (p.read_bytes() if p.is_file() else None) for p in sorted(d.rglob("*"))}


def _cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solvers.app.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


# the command-line rows start a Python process each: they run in the slow lane
@pytest.mark.parametrize("kind, target, pattern", [
    pytest.param(*row[1:], id=row[0], marks=[pytest.mark.slow] if row[1] == "cli" else []) for row in REFUSALS])
def test_refused_up_front(tmp_path, monkeypatch, kind, target, pattern):
    # the memory refusals against a machine of known size (80% of 16 GiB): the estimates of the api rows
    # (17.9 GiB up) would fit a larger CI machine, which would then start the runs. The cli rows cannot be
    # patched (a subprocess): their estimates (3.5-36 PiB) exceed any machine (3.6 TiB did not: a 6 TiB node)
    monkeypatch.setattr("solvers._memory.physical_memory", lambda: 16.0 * 2 ** 30)
    if kind == "api":
        with pytest.raises((ValueError, TypeError)) as e:
            target()
        assert re.search(pattern, str(e.value)), str(e.value)
        return
    if kind == "config":
        from solvers.app.config import ConfigError
        with pytest.raises(ConfigError) as e:
            parse_config(target)
        assert re.search(pattern, str(e.value)), str(e.value)
        return
    assert kind == "cli", kind
    args, text, *setup = target
    if text is not None:
        (tmp_path / "c.toml").write_text(text)
    for s in setup:
        s(tmp_path)
    before = _tree(tmp_path)
    r = _cli(args, tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(lines) == 1 and lines[0].startswith("attnpde: error: "), r.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert r.stdout == "", r.stdout
    # nothing created, nothing overwritten (an archive passed with --force is byte-identical)
    assert _tree(tmp_path) == before


def test_sweep_resume_skips_finished_members(tmp_path):
    """--resume over a sweep whose members are all finished: each is skipped (and said so), the summary is
    rebuilt from the archives; nothing runs."""
    from solvers.app.config import load_config
    from solvers.app.sweep import member_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(SMALL)
    for beta in (1.0, 2.0):
        m = member_config(load_config(cfg), beta)
        archive(f"c/{m.name}.h5", "finished", m.text)(tmp_path)
    before = {p: p.read_bytes() for p in (tmp_path / "c").glob("*.h5")}
    r = _cli(["sweep", "c.toml", "--beta", "1,2", "--resume"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[beta=1] c/c_beta1.h5 is finished: skipped" in r.stderr
    assert "[beta=2] c/c_beta2.h5 is finished: skipped" in r.stderr
    assert (tmp_path / "c" / "summary.json").exists()
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("particles", [
    "[particles]\nn = 10\nt_final = 2.0\nsave_every = 0.5\n",          # the same times, to a later end
    "[particles]\nn = 10\nt_final = 1.0\nsave_every = 0.25\n",         # every second one in common
    "[particles]\nn = 10\nt_final = 3.0\ndt = 0.05\n[particles.stop]\nwindow = 3\n",   # 0.5 = 10 dt, the default
    "[particles]\nn = 10\nt_final = 3.0\ndt = 0.05\n[particles.stop]\n",     # an empty one: the default rule
])
def test_a_comparison_with_common_times_after_t0_is_accepted(particles):
    """The refusals above only where fewer than two snapshot times after t = 0 are shared (1e-9 relative, as
    compare): here 0.5 and 1 are."""
    cfg = parse_config(BASE + PDE + particles + "[compare]\n")
    assert cfg.compare == {}


# --- the same words in Python and in TOML -----------------------------------------------------------------------
T_FINALS = ["infinity", "inf", -np.inf, np.nan, 0.0, -1.0, "10"]


@pytest.mark.parametrize("v", T_FINALS, ids=[repr(v) for v in T_FINALS])
def test_a_configuration_refuses_t_final_in_the_words_of_the_python_check(v):
    """pde.t_final in TOML and t_final of the Python checks (solvers.validators.number with infinite=) accept
    the same values, +inf included, and refuse the others in the same words."""
    from solvers import validators
    from solvers.app.config import ConfigError
    toml = {"infinity": '"infinity"', "inf": '"inf"', "10": '"10"'}.get(v) if isinstance(v, str) else \
        ("-inf" if v == -np.inf else "nan" if v != v else repr(v))
    with pytest.raises(ConfigError) as e:
        parse_config(BASE + f"[pde]\ndegree = 16\nt_final = {toml}\n")
    with pytest.raises(ValueError) as p:
        validators.number("t_final", v, gt=0, infinite=validators.UNTIL_CERTIFIED)
    assert (e.value.path, e.value.detail) == ("pde.t_final", str(p.value).removeprefix("t_final "))
    assert parse_config(BASE + "[pde]\ndegree = 16\nt_final = inf\n").pde.t_final == np.inf
    assert validators.number("t_final", np.inf, gt=0, infinite=validators.UNTIL_CERTIFIED) == np.inf


def test_solve_pde_refuses_t_final_in_the_words_of_the_configuration():
    from solvers.app.config import ConfigError
    from solvers.pde import prepare_pde
    with pytest.raises(ConfigError) as e:
        parse_config(BASE + '[pde]\ndegree = 16\nt_final = "infinity"\n')
    with pytest.raises(ValueError) as p:
        prepare_pde(Model(2, 1.0, "ascent"), "infinity", 16)
    assert e.value.detail == str(p.value).removeprefix("t_final ")
