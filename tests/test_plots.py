"""The figures of `attnpde plot`, judged by matplotlib's own objects (scales, lines, texts), never by pixels.

Two small archives are written once: the main paper's S1 on the circle (PDE to t = 400, saved every 5, past
its handoff at t = 0.008; 200 particles that converge near t = 47; [compare]) and the antipodal pair of
tests/test_terminal.py run to t_final = inf (one plateau, a certified end, the handoff at t = 8.8).
"""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from solvers.app import plots  # noqa: E402
from solvers.app.archive import load  # noqa: E402
from solvers.app.config import parse_config  # noqa: E402
from solvers.app.runner import run_config  # noqa: E402

S1 = """[model]
d = 2
beta = 5.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "relu"
seed = 111
[pde]
degree = 64
t_final = 400.0
save_every = 5.0
handoff_degree = 128
nodes = 512
error_estimate = false
[particles]
n = 200
seed = 42
integrator = "euler"
dt = 0.1
t_final = 2000.0
save_every = 0.5
[particles.stop]
window = 10
drift_tol = 5e-4
scale = 0.5
[compare]
moments = 8
"""
PAIR = ('[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[initial]\nkind = "zonal_harmonic"\ndegree = 2\namplitude = 0.5\n'
        "[pde]\ndegree = 32\nt_final = inf\nsave_every = 1.0\nnodes = 256\nhandoff_degree = 128\n")


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    for name, text in (("s1", S1), ("pair", PAIR)):
        run_config(parse_config(text), d / f"{name}.h5", log=lambda s: None, progress=False)
    return {"s1": load(d / "s1.h5"), "pair": load(d / "pair.h5")}


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions draw, kept open (instead of written) for the test to inspect."""
    import matplotlib.pyplot as plt
    figs = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.__setitem__(path.name, fig) or path)
    yield figs
    for fig in figs.values():
        plt.close(fig)


def _texts(ax):
    return [t for t in ax.texts if t.get_text()]


# --- the time axis ---------------------------------------------------------------------------------------------
def test_time_scale_follows_the_motion():
    t = np.arange(0.0, 1001.0, 5.0)
    early = np.where(t[1:] <= 40, 1.0, 1e-6)                  # collapses by t = 40, then sits still
    assert plots.time_scale(t, early) == "log"
    assert plots.time_scale(t, np.ones(len(t) - 1)) == "linear"  # moving evenly: linear time shows it
    assert plots.time_scale(t) == "linear"                     # snapshots evenly spaced, no motion given
    # positive times 1 .. 5, less than a decade: linear however early the motion
    assert plots.time_scale(np.arange(0.0, 6.0), np.array([1.0, 1e-6, 1e-6, 1e-6, 1e-6])) == "linear"
    # geometrically spaced snapshots are spread evenly on a log axis
    assert plots.time_scale(np.concatenate([[0.0], np.geomspace(0.01, 100.0, 50)])) == "log"


def test_spacetime_uses_log_time_and_draws_the_node_measure_past_the_handoff(archives, figures, tmp_path):
    run = archives["s1"]
    plots._spacetime_figure(run, tmp_path)
    ax = figures["spacetime.png"].axes[0]
    # snapshots 0, 5, ..., 400, the collapse by t ~ 40: a log axis from the first positive snapshot
    assert ax.get_yscale() == "log" and ax.get_ylim()[0] == pytest.approx(5.0)
    assert "log scale" in ax.get_ylabel()
    # the handoff (t = 0.008) precedes the first band: the title says so rather than drawing no line silently
    assert "before the first band: every band is the node measure" in ax.get_title()
    # past the handoff each band is the node measure (non-negative, total mass 1), not its ringing series
    mesh = ax.collections[-1]
    bins = plots._circle_bins(plots.SPACETIME_BINS)
    dens = mesh.get_array().reshape(-1, plots.SPACETIME_BINS)
    assert np.ma.min(dens) >= 1e-2 - 1e-15                     # clipped to the scale's floor, no negative lobes
    raw = plots._node_density(*(lambda n: (n.x, n.w, n.count))(run.pde.node_measure(-1)), bins)
    assert np.sum(raw * np.diff(bins)) / (2 * np.pi) == pytest.approx(1.0, abs=1e-12)


def test_the_handoff_line_is_drawn_where_it_falls_within_the_time_axis(archives, figures, tmp_path):
    run = archives["pair"]
    th = run.pde.t_handoff
    plots._spacetime_figure(run, tmp_path)
    ax = figures["spacetime.png"].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "_handoff"]
    assert len(lines) == 1 and np.allclose(lines[0].get_ydata(), th)
    assert any(t.get_text().startswith(f"handoff t = {th:.3g}") for t in ax.texts)


def test_final_state_has_one_axis_per_meaning_and_legible_mass_labels(archives, figures, tmp_path):
    run = archives["s1"]
    plots._final_figure(run, tmp_path)
    fig = figures["final.png"]
    assert len(fig.axes) == 2                                   # no twin axis
    top, atoms = fig.axes
    assert top.get_ylabel() == "density (uniform = 1)" and top.get_yscale() == "log"
    assert atoms.get_ylabel() == "atom mass"
    labels = _texts(atoms)
    pde_masses = run.atoms["pde"][1]
    part_masses = plots._particle_atoms(run, -1)[1]
    assert len(labels) == len(pde_masses) + len(part_masses) >= 4
    for t in labels:
        assert t.get_rotation() == 0 and t.get_fontsize() >= 10
    assert {f"{m:.3f}" for m in np.concatenate([pde_masses, part_masses])} == {t.get_text() for t in labels}
    # the labels sit above the stems, inside the axis, not over the density curves
    assert all(t.axes is atoms for t in labels)
    # the two solvers ended at different times: said in the title and in the legend, not "at the same time"
    t_p = run.particles.t[-1]
    title = top.get_title()
    assert "each solver's own end" in title and "PDE at t = 400 (t_final)" in title
    assert f"particles at t = {t_p:.4g} (converged)" in title
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert legend[0].startswith("PDE node measure at t = 400") and f"at t = {t_p:.4g} (converged)" in legend[1]


def test_a_pde_only_final_state_names_no_particles_and_shows_the_terminal_atoms(archives, figures, tmp_path):
    run = archives["pair"]
    plots._final_figure(run, tmp_path)
    top, atoms = figures["final.png"].axes
    assert "particle" not in top.get_title() and top.get_title().startswith("final state of the PDE at t = ")
    T = run.pde.terminal
    labels = [t.get_text() for t in _texts(atoms)]
    assert labels == [plots._mass_text(T.masses[0], T.mass_errors[0])] and "±" in labels[0]
    assert "certified terminal atoms" in atoms.get_legend().get_texts()[0].get_text()
    # the error bars: one vertical segment per atom, of half-length its mass error
    from matplotlib.collections import LineCollection
    bars = [c for c in atoms.collections if isinstance(c, LineCollection) and len(c.get_segments()) == 1
            and np.ptp(c.get_segments()[0][:, 1]) > 0 and np.ptp(c.get_segments()[0][:, 0]) == 0]
    assert any(np.ptp(b.get_segments()[0][:, 1]) == pytest.approx(2 * T.mass_errors[0]) for b in bars)


def test_energy_of_a_run_to_its_end_on_log_time_with_plateaus_and_the_certified_end(archives, figures, tmp_path):
    run = archives["pair"]
    pde = run.pde
    plots._energy_figure(run, tmp_path)
    fig = figures["energy.png"]
    energy = fig.axes[0]
    assert energy.get_xscale() == "log"
    assert energy.get_xlim()[0] == pytest.approx(pde.t[pde.t > 0][0])      # from the first positive snapshot
    (pl,) = pde.plateaus
    spans = [p for p in energy.patches if p.get_label().startswith("plateau")]
    assert len(spans) == 1 and spans[0].get_x() == pytest.approx(pl.t_entered)
    assert spans[0].get_x() + spans[0].get_width() == pytest.approx(pl.t_certified)
    assert any(t.get_text().startswith(f"plateau 1: E = {pl.energy:.4f}") for t in energy.texts)
    star = [ln for ln in energy.get_lines() if ln.get_label().startswith("certified end")]
    assert len(star) == 1 and star[0].get_xdata()[0] == pde.terminal.t
    # the spectral tail and max rho stop at the handoff; the node continuation's panels start there
    tail, rho, speed, nodes = fig.axes[1:5]
    th = pde.t_handoff
    assert tail.get_ylabel() == "spectral tail" and rho.get_ylabel().startswith("max rho")
    for ax in (tail, rho):
        data = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
        assert data and max(np.max(ln.get_xdata()) for ln in data) <= th
    assert speed.get_ylabel() == "max |v| over the nodes"
    assert min(np.min(ln.get_xdata()) for ln in speed.get_lines() if len(ln.get_xdata()) > 2) > th


def test_comparison_marks_the_handoff_and_takes_the_runs_time_axis(archives, figures, tmp_path):
    run = archives["s1"]
    plots.plot_comparison(run.comparison, tmp_path / "comparison.png", title="t", t_handoff=10.0, scale="log")
    dist, conc = figures["comparison.png"].axes
    assert dist.get_xscale() == conc.get_xscale() == "log"
    for ax in (dist, conc):
        assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() == "_handoff"] == [10.0]


def test_sphere_maps_are_a_grid_with_labelled_axes_and_atom_masses(tmp_path, figures, monkeypatch):
    text = ('[model]\nd = 3\nbeta = 1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.25\n'
            "[particles]\nn = 50\nt_final = 1.0\nsave_every = 0.25\n")
    run_config(parse_config(text), tmp_path / "a.h5", log=lambda s: None, progress=False)
    run = load(tmp_path / "a.h5")
    # atoms of known masses (a run this short forms none): how they are labelled is what is tested
    pos = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    monkeypatch.setattr(plots, "_pde_atoms", lambda run: (pos, np.array([0.6, 0.4]), np.array([1e-3, 2e-3]),
                                                          "PDE: atoms (node groups)"))
    plots._sphere_figures(run, tmp_path)
    fig = figures["maps.png"]
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    assert len(maps) == 4
    # a 2 x 2 grid, not a strip: two distinct rows and two distinct columns of panels
    x0 = {round(ax.get_position().x0, 3) for ax in maps}
    y0 = {round(ax.get_position().y0, 3) for ax in maps}
    assert len(x0) == 2 and len(y0) == 2
    w, h = fig.get_size_inches()
    assert w / h < 2
    for ax in maps:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["120°W", "60°W", "0°", "60°E", "120°E"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["60°S", "30°S", "0°", "30°N", "60°N"]
    texts = [t for t in _texts(maps[-1])]
    assert {"0.600 ± 1e-3", "0.400 ± 2e-3"} <= {t.get_text() for t in texts}
    assert all(t.get_fontsize() >= 10 and t.get_rotation() == 0 for t in texts)


# --- info and the comparison tell one story -------------------------------------------------------------------
def _comparison(particle_masses, t=10.0):
    from solvers.comparison import Comparison
    pairs = [{"pde_position": np.array([1.0, 0.0]), "particle_position": np.array([1.0, 0.0]), "position_error": 0.0,
              "pde_mass": m, "particle_mass": m, "mass_difference": 0.0} for m in particle_masses]
    z = np.zeros(2)
    return Comparison(t=np.array([0.0, t]), w1=z, mmd=z, moment_gap=z, energy_gap=z, cdf_drift=None,
                      matched_atoms=pairs, unmatched_pde=[], unmatched_particles=[], kernel="exp", moments_degree=8,
                      options={"atom_radius": 0.1, "smoothing": 0.025, "min_mass": 0.01})


def test_info_says_why_its_clusters_are_not_the_comparisons_particle_atoms():
    """The demo's case: single linkage chains the whole cloud into one cluster of mass 1, the comparison
    counts 0.5932 within 0.1 rad of the one density peak. Both are printed: info says why they differ."""
    from types import SimpleNamespace

    from solvers.app.info import _clusters_and_comparison
    r = SimpleNamespace(t=np.array([0.0, 10.0]))
    lines = _clusters_and_comparison(r, np.array([1.0]), _comparison([0.5932]))
    assert "names other particle atoms: 1 by its own rule (density peaks, each with the mass within 0.1 rad" in lines[0]
    assert lines[0].endswith("0.5932") and "this cluster holds 1.0000 of the mass, those atoms 0.5932" in lines[1]
    assert "0.4068 they link to through the diffuse mass" in lines[1]
    # the same atoms, but the comparison's last common time precedes the particles' end: said so
    r = SimpleNamespace(t=np.array([0.0, 42.0]))
    (line,) = _clusters_and_comparison(r, np.array([0.551, 0.449]), _comparison([0.551, 0.449], t=40.0))
    assert "finds the same 2 particle atom(s)" in line and "at t = 40, the last time both solvers saved" in line
    assert "the particles' end, t = 42" in line


def test_the_sweeps_count_axis_has_integer_ticks_when_every_count_is_the_same(tmp_path, monkeypatch):
    """Counts are integers: a sweep whose members all count 2 clusters gets ticks 0, 1, 2, 3, not 1.9 ... 2.1."""
    import matplotlib.pyplot as plt
    from solvers.app import sweep

    seen = {}
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, path, **k: seen.update(ticks=fig.axes[0].get_yticks()))
    config = parse_config('[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 1.0\n')
    rows = [{"beta": b, "clusters": 2, "pde_atoms": 2} for b in (1.0, 4.0, 9.0)]
    sweep._plot(rows, tmp_path / "c.png", config)
    ticks = seen["ticks"]
    assert len(ticks) >= 2 and np.all(ticks == np.round(ticks)) and ticks.min() >= 0, ticks
