"""The figures of `attnpde plot`, judged by matplotlib's own objects (scales, lines, texts), never by pixels.

Two small archives are written once: the main paper's S1 on the circle (PDE to t = 400, saved every 5, past
its handoff at t = 0.008; 200 particles that converge near t = 47; [compare]) and the antipodal pair of
tests/test_terminal.py run to t_final = inf (one plateau, a certified end, the handoff at t = 8.8).
"""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from solvers.app import figure_check, plots, plots_base, plots_circle, plots_energy, plots_sphere  # noqa: E402
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
def figures():
    """The figures the plot functions draw, kept open (instead of written) for the test to inspect."""
    import matplotlib.pyplot as plt
    with figure_check.captured() as figs:
        yield figs
    for fig in figs.values():
        plt.close(fig)


def _texts(ax):
    return [t for t in ax.texts if t.get_text()]


# --- the time axis ---------------------------------------------------------------------------------------------
def test_time_is_linear_up_to_three_decades_and_symlog_beyond():
    t = np.arange(0.0, 1001.0, 5.0)                          # 5 .. 1000: 2.3 decades
    ta = plots_base.time_axis(t)
    assert (ta.scale, ta.hi, ta.first) == ("linear", 1000.0, 5.0)
    ta = plots_base.time_axis(t, np.arange(0.0, 42.0, 0.5))   # the particles' 0.5 joins: 3.3 decades
    assert (ta.scale, ta.hi, ta.first) == ("symlog", 1000.0, 0.5)
    assert plots_base.time_axis(np.array([0.0, 1.0, 1000.0])).scale == "linear"      # exactly three decades
    # the axis' coordinate: t = 0 at 0, linear up to the first time, then logarithmic (a decade per unit
    # beyond the strip of ZERO_STRIP decades)
    u = ta.forward(np.array([0.0, 0.25, 0.5, 5.0, 50.0]))
    assert u[0] == 0.0 and u[1] == pytest.approx(u[2] / 2)
    assert np.diff(u[2:]) / (u[3] - u[2]) == pytest.approx([1.0, 1.0])
    assert ta.inverse(u) == pytest.approx([0.0, 0.25, 0.5, 5.0, 50.0])


def test_spacetime_draws_t0_and_the_node_measure_past_the_handoff(archives, figures, tmp_path):
    run = archives["s1"]
    plots_circle.spacetime_figure(run, tmp_path)
    ax = figures["spacetime.png"].axes[0]
    # PDE snapshots 0, 5, ..., 400 and particle ones from 0.5: 2.9 decades, a linear axis from t = 0
    assert ax.get_yscale() == "linear" and ax.get_ylim() == (0.0, 400.0)
    # the handoff (t = 0.008) falls within the band of t = 0: the line is the edge of the first band of the node
    # measure, half way to t = 5, and the title says what is on each side
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "_handoff"]
    assert len(lines) == 1 and np.allclose(lines[0].get_ydata(), 2.5)
    assert "below the dashed line the spectral series, above it the node measure (the handoff at t = 0.00808)" \
        in ax.get_title()
    # past the handoff each band is the node measure (non-negative, total mass 1), not its ringing series
    mesh = ax.collections[-1]
    bins = plots_circle._circle_bins(plots_circle.SPACETIME_BINS)
    dens = mesh.get_array().reshape(-1, plots_circle.SPACETIME_BINS)
    assert np.ma.min(dens) >= 1e-2 - 1e-15                     # clipped to the scale's floor, no negative lobes
    raw = plots_circle.node_density(*(lambda n: (n.x, n.w, n.count))(run.pde.node_measure(-1)), bins)
    assert np.sum(raw * np.diff(bins)) / (2 * np.pi) == pytest.approx(1.0, abs=1e-12)


def test_the_handoff_line_is_drawn_where_it_falls_within_the_time_axis(archives, figures, tmp_path):
    run = archives["pair"]
    th = run.pde.t_handoff
    plots_circle.spacetime_figure(run, tmp_path)
    ax = figures["spacetime.png"].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "_handoff"]
    # the edge between the bands of the last spectral snapshot and the first node snapshot, around the handoff
    t = run.pde.t
    k = int(np.argmax(t > th))
    assert len(lines) == 1 and t[k - 1] < lines[0].get_ydata()[0] < t[k]
    assert f"(the handoff at t = {th:.3g})" in ax.get_title()


def test_final_state_has_one_axis_per_meaning_and_legible_mass_labels(archives, figures, tmp_path):
    run = archives["s1"]
    plots_circle.final_figure(run, tmp_path)
    fig = figures["final.png"]
    assert len(fig.axes) == 2                                   # no twin axis
    top, atoms = fig.axes
    assert top.get_ylabel().startswith("density (uniform = 1)") and top.get_yscale() == "log"
    assert atoms.get_ylabel() == "atom mass"
    labels = _texts(atoms)
    pde_masses = run.atoms["pde"][1]
    part_masses = plots_base.particle_atoms(run, -1)[1]
    assert len(labels) == len(pde_masses) + len(part_masses) >= 4
    for t in labels:
        assert t.get_rotation() == 0 and t.get_fontsize() >= 10
    assert {plots_base.mass_text(m) for m in np.concatenate([pde_masses, part_masses])} == {t.get_text() for t in labels}
    assert all(t.axes is atoms for t in labels)
    # the two solvers ended at different times: said in the title and in the legend, not "at the same time"
    t_p = run.particles.t[-1]
    title = top.get_title()
    assert "each solver's own end" in title and "PDE at t = 400 (t_final)" in title
    assert f"particles at t = {t_p:.4g} (converged)" in title
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert legend[0].startswith("PDE at t = 400 (t_final):\nnode measure") and f"at t = {t_p:.4g} (converged)" in legend[1]


def test_a_pde_only_final_state_names_no_particles_and_shows_the_terminal_atoms(archives, figures, tmp_path):
    run = archives["pair"]
    plots_circle.final_figure(run, tmp_path)
    top, atoms = figures["final.png"].axes
    assert "particle" not in top.get_title() and top.get_title().startswith("final state of the PDE at t = ")
    T = run.pde.terminal
    labels = [t.get_text() for t in _texts(atoms)]
    assert labels == [plots_base.mass_text(T.masses[0], T.mass_errors[0])] and "±" in labels[0]
    assert "certified terminal atoms" in atoms.get_legend().get_texts()[0].get_text()
    # the error bars: one vertical segment per atom, of half-length its mass error
    from matplotlib.collections import LineCollection
    bars = [c for c in atoms.collections if isinstance(c, LineCollection) and len(c.get_segments()) == 1
            and np.ptp(c.get_segments()[0][:, 1]) > 0 and np.ptp(c.get_segments()[0][:, 0]) == 0]
    assert any(np.ptp(b.get_segments()[0][:, 1]) == pytest.approx(2 * T.mass_errors[0]) for b in bars)


def test_energy_of_a_run_to_its_end_with_plateaus_and_the_certified_end(archives, figures, tmp_path):
    run = archives["pair"]
    pde = run.pde
    plots_energy.energy_figure(run, tmp_path)
    fig = figures["energy.png"]
    energy = fig.axes[0]
    # snapshots 1 .. 112: two decades, a linear axis from t = 0 to the end
    assert energy.get_xscale() == "linear" and energy.get_xlim() == (0.0, pde.t[-1])
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
    # every panel on the run's time range
    assert {ax.get_xlim() for ax in (energy, tail, rho, speed, nodes)} == {(0.0, pde.t[-1])}


def test_energy_drops_the_panels_of_a_spectral_phase_it_cannot_show(archives, figures, tmp_path):
    """S1 hands off at t = 0.008, before its first snapshot after t = 0: no near-empty spectral panels, the
    energy panel's title says when the spectral solver ended."""
    run = archives["s1"]
    plots_energy.energy_figure(run, tmp_path)
    fig = figures["energy.png"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["energy E", "max |v| over the nodes", "nodes"]
    assert f"spectral solver to the handoff at t = {run.pde.t_handoff:.3g}: 1 snapshot" in fig.axes[0].get_title()


def test_comparison_marks_the_handoff_and_takes_the_runs_time_axis(archives, figures, tmp_path):
    run = archives["s1"]
    ta = plots_base.time_axis(np.array([0.0, 0.01, 400.0]))
    plots.plot_comparison(run.comparison, tmp_path / "comparison.png", title="t", t_handoff=10.0, time=ta)
    dist, conc = figures["comparison.png"].axes
    assert dist.get_xscale() == conc.get_xscale() == "symlog" and conc.get_xlim() == (0.0, 400.0)
    for ax in (dist, conc):
        assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() == "_handoff"] == [10.0]


def test_sphere_maps_are_a_grid_with_labelled_axes_and_atom_masses(tmp_path, figures, monkeypatch):
    text = ('[model]\nd = 3\nbeta = 1.0\nflow = "ascent"\n[pde]\ndegree = 16\nt_final = 1.0\nsave_every = 0.25\n'
            "[particles]\nn = 50\nt_final = 1.0\nsave_every = 0.25\n")
    run_config(parse_config(text), tmp_path / "a.h5", log=lambda s: None, progress=False)
    run = load(tmp_path / "a.h5")
    # atoms of known masses (a run this short forms none): how they are labelled is what is tested
    pos = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    monkeypatch.setattr(plots_sphere, "pde_atoms", lambda run: (pos, np.array([0.6, 0.4]), np.array([1e-3, 2e-3]),
                                                                "PDE: atoms (node groups)"))
    plots_sphere.sphere_figures(run, tmp_path)
    fig = figures["maps.png"]
    maps = [ax for ax in fig.axes if ax.name == plots_sphere.MAP_PROJECTION]
    assert len(maps) == 4
    # a 2 x 2 grid, not a strip: two distinct rows and two distinct columns of panels
    x0 = {round(ax.get_position().x0, 3) for ax in maps}
    y0 = {round(ax.get_position().y0, 3) for ax in maps}
    assert len(x0) == 2 and len(y0) == 2
    w, h = fig.get_size_inches()
    assert w / h < 2
    fig.canvas.draw()
    for ax in maps:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["120°W", "60°W", "0°", "60°E", "120°E"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["60°S", "30°S", "0°", "30°N", "60°N"]
        # the longitudes under the map, not on its equator among the atoms
        bottom = ax.get_window_extent().y0
        assert all(t.get_window_extent().y1 <= bottom + 1 for t in ax.get_xticklabels())
    texts = [t for t in _texts(maps[-1])]
    assert {"0.6000 ± 0.0010", "0.400 ± 0.002"} <= {t.get_text() for t in texts}
    assert all(t.get_fontsize() >= 10 and t.get_rotation() == 0 for t in texts)


def test_masses_are_written_to_their_errors_precision():
    """The issue's case and others: the mass to the decimal of the error's first digit (two digits for a
    leading 1), so that the printed interval contains the mass and is as wide as its error."""
    assert plots_base.mass_text(0.0005, 4e-4) == "0.0005 ± 0.0004"
    assert plots_base.mass_text(0.5602, 2.3e-3) == "0.560 ± 0.002"
    assert plots_base.mass_text(0.5972, 4.9e-4) == "0.5972 ± 0.0005"
    assert plots_base.mass_text(0.5602, 1.4e-3) == "0.5602 ± 0.0014"
    assert plots_base.mass_text(0.4375, 3.9e-3) == "0.438 ± 0.004"
    assert plots_base.mass_text(0.0005) == "0.00050"            # without an error: two significant digits
    assert plots_base.mass_text(0.5625) == "0.562"
    rng = np.random.default_rng(0)
    for m, e in zip(rng.uniform(1e-4, 1.0, 200), 10.0 ** rng.uniform(-5, -1, 200)):
        mass, err = (float(v) for v in plots_base.mass_text(m, e).split(" ± "))
        places = len(plots_base.mass_text(m, e).split(" ± ")[0].split(".")[1])
        assert abs(mass - m) <= 0.5 * 10.0 ** -places + 1e-12      # the mass, rounded at the error's digit
        assert err == pytest.approx(e, rel=0.5, abs=0.5 * 10.0 ** -places)


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


def test_the_sweeps_count_axis_has_integer_ticks_when_every_count_is_the_same(tmp_path):
    """Counts are integers: a sweep whose members all count 2 clusters gets ticks 0, 1, 2, 3, not 1.9 ... 2.1."""
    from solvers.app import sweep

    rows = [{"beta": b, "clusters": 2, "pde_atoms": 2} for b in (1.0, 4.0, 9.0)]
    with figure_check.captured() as figs:
        sweep.plot_sweep(tmp_path, rows, "t")
    ticks = figs[sweep.FIGURE].axes[0].get_yticks()
    assert len(ticks) >= 3 and np.all(ticks == np.round(ticks)) and ticks.min() >= 0, ticks
