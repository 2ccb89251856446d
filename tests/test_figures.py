"""Every figure kind of attnpde follows the rules of tests/figure_rules.py: no two texts overlap, no legend covers
a plotted point, every axis has at least 3 labelled ticks, no panel is empty, no text under 8 pt or out of its
place, and time is logarithmic (t = 0 shown) where the run spans more than three decades, linear otherwise.

The archives, written once for the module (about 10 s together): a circle run (PDE past its handoff and 200
particles, compared; t = 0.5 .. 60), a sphere run (PDE with node groups and error bars, 300 particles, compared),
a long run (the antipodal pair of tests/test_terminal.py to t_final = inf: snapshots 0.05 .. 109, one plateau,
a certified end), a particle-convergence study (`validate`), the mode-1 branch on S^1 at beta = 3 (`attnpde
branch`), and a sweep over three betas (`attnpde sweep`, PDE only). Each figure is drawn as the command draws
it (its ``savefig`` captured instead of writing the file) and checked on the renderer's geometry.
"""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from solvers.app import figure_check as rules  # noqa: E402
from solvers.app.archive import load  # noqa: E402
from solvers.app.config import parse_config  # noqa: E402
from solvers.app.runner import run_config  # noqa: E402

CIRCLE = """[run]
name = "circle"
[model]
d = 2
beta = 5.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 64
t_final = 60.0
save_every = 2.0
handoff_degree = 128
nodes = 512
[particles]
n = 200
seed = 42
integrator = "euler"
dt = 0.1
t_final = 60.0
save_every = 0.5
[compare]
moments = 8
"""
SPHERE = """[run]
name = "sphere"
[model]
d = 3
beta = 5.0
flow = "descent"
[model.perceptron]
units = 3
activation = "relu"
seed = 111
[pde]
degree = 16
t_final = 40.0
save_every = 2.0
nodes = 2048
[particles]
n = 300
seed = 42
integrator = "euler"
dt = 0.1
t_final = 40.0
save_every = 1.0
[compare]
moments = 4
"""
LONG = ('[run]\nname = "long"\n[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[initial]\nkind = "zonal_harmonic"\n'
        'degree = 2\namplitude = 0.5\n[pde]\ndegree = 32\nt_final = inf\nsave_every = 0.05\nnodes = 256\n'
        'handoff_degree = 128\n')
VALIDATE = """[model]
d = 2
beta = 1.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 64
t_final = 2.0
save_every = 0.5
[particles]
n = 10
integrator = "rk4"
dt = 0.05
t_final = 2.0
save_every = 0.5
"""
BRANCH = ('[run]\nname = "branch"\n[model]\nd = 2\nbeta = 3.0\nflow = "ascent"\n[branch]\nmode = 1\n'
          'noise_range = [0.03, 0.07]\ndegree = 32\nmax_points = 100\n')
SWEEP = """[run]
name = "sweep"
[model]
d = 2
beta = 1.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 32
t_final = 60.0
save_every = 5.0
nodes = 256
error_estimate = false
"""


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    d = tmp_path_factory.mktemp("figures")
    for name, text in (("circle", CIRCLE), ("sphere", SPHERE), ("long", LONG)):
        run_config(parse_config(text), d / f"{name}.h5", log=lambda s: None, progress=False)
    from solvers.app.validate import validate
    validate(parse_config(VALIDATE), [20, 80], 2, d / "validation.h5", workers=1, log=lambda s: None)
    from solvers.app.branch import parse_branch_config, run_branch
    run_branch(parse_branch_config(BRANCH), d / "branch.h5", log=lambda s: None, figure=False)
    return d


@pytest.fixture(scope="module")
def drawn(archives):
    """{(archive, figure file): (figure, run span or None)} of every figure `attnpde plot` draws of the archives,
    and the sweep's."""
    from solvers.app.plots import plot_archive

    from solvers.app.plots import plot_validation
    out = {}
    for name in ("circle", "sphere", "long", "validation", "branch"):
        path = archives / f"{name}.h5"
        run = load(path)
        times = [r.t for r in (run.pde, run.particles) if r is not None and len(r.t)]
        span = rules.span_of(*times) if times else None
        with rules.captured() as got:
            if name == "validation":
                # its own figure only (as `attnpde validate` draws it): its PDE's are the circle run's kinds
                plot_validation(run.validation, archives / "validation.png", "validation")
            else:
                plot_archive(path, archives / f"{name}_plots")
        for fname, fig in got.items():
            out[(name, fname)] = (fig, span)
    from solvers.app.sweep import sweep
    with rules.captured() as got:
        sweep(parse_config(SWEEP), [1.0, 5.0, 25.0], archives / "sweep", workers=1)
    for fname, fig in got.items():
        out[("sweep", fname)] = (fig, None)
    yield out
    for fig, _ in out.values():
        fig.clf()


#: figure kinds and the file names that are theirs
KINDS = {"energy": ("energy.png",), "maps": ("maps.png",), "final": ("final.png",), "spacetime": ("spacetime.png",),
         "comparison": ("comparison.png",), "validation": ("validation.png",), "branch": ("branch_branch.png",),
         "sweep": ("clusters_vs_sqrt_beta.png",)}


def test_every_figure_kind_is_drawn(drawn):
    made = {fname for _, fname in drawn}
    for kind, names in KINDS.items():
        assert made & set(names), f"no {kind} figure drawn (made: {sorted(made)})"
    assert made <= {n for names in KINDS.values() for n in names}, f"a figure kind without a check: {sorted(made)}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_figure_kind_follows_the_rules(kind, drawn):
    broken = {}
    for (name, fname), (fig, span) in sorted(drawn.items(), key=lambda kv: kv[0]):
        if fname in KINDS[kind]:
            found = rules.check(fig, span)
            if found:
                broken[f"{name}/{fname}"] = found
    assert not broken, "\n".join(f"{where}: " + "\n    ".join(v) for where, v in broken.items())


def test_the_sweep_shows_what_varies_and_its_table_is_filled(archives, drawn):
    """A PDE-only sweep: the table has the PDE's columns filled (atoms, largest mass, end) and no particle
    columns of dashes; the figure draws the counts, every atom's mass and the time of each end against
    sqrt(beta), from the members' archives."""
    import json

    from solvers.app import sweep
    rows = json.loads((archives / "sweep" / "summary.json").read_text())
    text = sweep.table(rows).splitlines()
    assert "PDE atoms" in text[0] and "max mass" in text[0] and "clusters" not in text[0]
    for r, line in zip(rows, text[1:]):
        assert " - " not in line and f"{r['pde_max_mass']:.3f}" in line and f"at t = {r['pde_t']:.4g}" in line
        assert r["pde_masses"] and sum(r["pde_masses"]) <= 1.0 + 1e-9     # the atoms found: at most all the mass
    fig, _ = drawn[("sweep", sweep.FIGURE)]
    count, masses, ends = fig.axes[:3]
    assert [a.get_ylabel() for a in (count, masses, ends)] == ["count", "atom / cluster mass", "time t of the end"]
    sb = np.sqrt([r["beta"] for r in rows])
    (n,) = [ln for ln in count.get_lines() if ln.get_label().startswith("PDE atoms")]
    assert np.allclose(n.get_xdata(), sb) and list(n.get_ydata()) == [r["pde_atoms"] for r in rows]
    (m,) = masses.get_lines()
    assert sorted(m.get_ydata()) == sorted(x for r in rows for x in r["pde_masses"])
    t = np.concatenate([ln.get_ydata() for ln in ends.get_lines()])
    assert sorted(t) == sorted(r["pde_t"] for r in rows)


# --- the rules fail where they must -----------------------------------------------------------------------------
def _figure():
    fig, ax = plt.subplots(figsize=(5, 4))
    return fig, ax


def test_overlapping_texts_are_caught():
    fig, ax = _figure()
    ax.plot([0, 1, 2], [0, 1, 2])
    ax.text(0.5, 0.5, "first label", transform=ax.transAxes)
    ax.text(0.52, 0.5, "second label", transform=ax.transAxes)
    assert rules.broken_rules(rules.check(fig)) == ["overlap"]
    plt.close(fig)


def test_a_text_leaving_its_axes_and_a_small_text_are_caught():
    fig, ax = _figure()
    ax.plot([0, 1, 2], [0, 1, 2])
    ax.text(0.9, 0.5, "a label running out of the axes", transform=ax.transAxes)
    fig2, ax2 = _figure()
    ax2.plot([0, 1, 2], [0, 1, 2])
    ax2.tick_params(labelsize=6)
    assert rules.broken_rules(rules.check(fig)) == ["outside"]
    assert rules.broken_rules(rules.check(fig2)) == ["small"]
    plt.close(fig)
    plt.close(fig2)


def test_a_legend_over_a_curve_is_caught_and_one_beside_it_is_not():
    fig, ax = _figure()
    x = np.linspace(0, 1, 50)
    ax.plot(x, x, label="rising")
    ax.plot(x, 1 - x, label="falling")
    ax.legend(loc="center")                      # where the curves cross
    assert rules.broken_rules(rules.check(fig)) == ["legend"]
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12))   # below the axes, out of the data
    fig.subplots_adjust(bottom=0.3)
    assert rules.check(fig) == []
    plt.close(fig)


def test_an_axis_with_two_labelled_ticks_and_an_empty_panel_are_caught():
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 4))
    a.plot([1, 2, 3], [1.3, 1.4, 1.5])
    a.set_yticks([1.35, 1.45])                      # two labelled ticks: too few to read the scale from
    b.plot([0.5], [0.5], "o")                       # one point: nothing to show
    b.axhline(0.2)                                  # a reference line is no data
    found = rules.check(fig)
    assert rules.broken_rules(found) == ["ticks", "empty"], found
    plt.close(fig)


def test_time_axes_must_be_log_with_zero_for_long_runs_and_linear_otherwise():
    fig, ax = _figure()
    t = np.array([0.0, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0])
    ax.plot(t, np.log1p(t))
    ax.set_xlabel("time t")
    fig.subplots_adjust(bottom=0.2)
    assert rules.broken_rules(rules.check(fig, span=(0.1, 1e4))) == ["time"]       # 5 decades on a linear axis
    assert rules.check(fig, span=(1.0, 100.0)) == []
    ax.set_xscale("log")
    assert rules.broken_rules(rules.check(fig, span=(0.1, 1e4))) == ["time"]       # log, but t = 0 is not shown
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(0, 1e4)
    ax.set_xticks([0, 0.1, 10, 1000])
    assert rules.check(fig, span=(0.1, 1e4)) == []
    assert rules.broken_rules(rules.check(fig, span=(1.0, 100.0))) == ["time"]     # 2 decades: linear
    plt.close(fig)


def test_time_axes_of_one_figure_must_share_their_range():
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 4))
    for ax, end in ((a, 39.0), (b, 1.8e4)):
        ax.plot([0, end / 2, end], [0, 1, 2])
        ax.set_xlabel("time t")
        ax.set_xlim(0, end)
    assert "time axes show different ranges" in " ".join(rules.check(fig, span=(1.0, 100.0)))
    plt.close(fig)


SLOW_STAGE = ('[run]\nname = "slow"\n[model]\nd = 2\nbeta = 15.0\nflow = "ascent"\n[model.perceptron]\nunits = 2\n'
              'activation = "relu"\nseed = 111\n[pde]\ndegree = 64\nt_final = inf\nsave_every = 1.0\nnodes = 512\n'
              'handoff_degree = 128\nerror_estimate = false\n')


@pytest.mark.slow
def test_a_run_through_a_slow_stage_to_t_1e12_draws_by_the_rules(tmp_path):
    """The paper protocol's S1 at beta = 15 with 512 nodes: a slow stage from t ~ 1e3 to the merge at ~ 7e12, shaded
    and labelled on the energy figure's log-time axis; every figure of the archive follows the rules."""
    from solvers.app.plots import plot_archive
    path = tmp_path / "slow.h5"
    run_config(parse_config(SLOW_STAGE), path, log=lambda s: None, progress=False)
    run = load(path)
    assert len(run.pde.slow_stages) == 1 and run.pde.t[-1] > 1e12
    span = rules.span_of(run.pde.t)
    with rules.captured() as got:
        plot_archive(path, tmp_path / "plots")
    energy = got["energy.png"]
    assert any("slow stage 1" in t.get_text() for ax in energy.axes for t in ax.texts)
    broken = {name: found for name, fig in got.items() if (found := rules.check(fig, span))}
    assert not broken, broken
