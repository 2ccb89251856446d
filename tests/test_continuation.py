"""The Lagrangian continuation of the PDE past its grid (solvers.lagrangian): agreement with the Eulerian
solver while both are resolved, exact results of the terminal state, and how runs end."""
import math

import numpy as np
import pytest

from solvers import Model, Perceptron, solve_pde
from solvers.lagrangian import NodeAtoms, Nodes, estimate_atoms, handoff_nodes, node_atoms
from solvers.pde_circle import CircleSpace
from solvers.pde_sphere import SphereSpace
from spectral import sphere


# --- consistency with the Eulerian solver ----------------------------------------------------------------
@pytest.mark.parametrize("d, degree, max_degree, nodes, node_rtol, tol", [
    (2, 64, 512, 1024, 1e-12, 1e-9),
    (3, 32, 128, 32768, 1e-10, 1e-8),           # the Gauss grid 128 x 256: nlat > L
])
@pytest.mark.slow
def test_continuation_agrees_with_the_eulerian_solver(d, degree, max_degree, nodes, node_rtol, tol):
    """From a resolved smooth state (GeLU, beta = 4, handoff forced at t = 0.5), the continuation and the
    Eulerian solver agree at t = 1 in every coefficient up to degree 64 (measured 2.6e-13 on S^1,
    7.9e-12 on S^2). Both runs keep their tail near round-off (tail_tol 1e-12), so that the handoff
    state is the exact solution and the Eulerian reference stays resolved."""
    m = Model(d, 4.0, "ascent", perceptron=Perceptron.random(d, d, "gelu", 1.0, seed=111))
    common = dict(save_every=0.5, rtol=1e-12, atol=1e-14, tail_tol=1e-12, max_degree=max_degree)
    eul = solve_pde(m, 1.0, degree, continuation="none", **common)
    lag = solve_pde(m, 1.0, degree, handoff_at=0.5, handoff_degree=max_degree, nodes=nodes, node_rtol=node_rtol,
                    node_atol=1e-2 * node_rtol, error_estimate=False, **common)
    assert eul.stop_reason == lag.stop_reason == "t_final" and eul.lagrangian is None
    assert lag.t_handoff == 0.5 and lag.lagrangian.handoff.reason == "handoff_at"
    assert lag.node_measure(0) is None and lag.node_measure(-1) is not None
    n = 65 if d == 2 else sphere.ncoef(64)
    assert np.abs(eul.coefficients(-1)[:n] - lag.coefficients(-1)[:n]).max() < tol
    assert np.array_equal(eul.t, lag.t)


# --- exact results of the terminal state ---------------------------------------------------------------------
@pytest.mark.slow
def test_three_fold_perturbation_collapses_into_three_equal_atoms():
    """Pure attention (USA, ascent, beta = 5) from rho_0 = 1 + 0.2 cos(3 theta): the flow keeps the
    three-fold symmetry, so it reaches three atoms of mass exactly 1/3 at 0, 2 pi / 3, 4 pi / 3 (the
    fastest-growing mode at beta = 5 is k* = 3). With 3072 nodes the node measure has the symmetry too, and
    the run certifies that state. It is a saddle (the reduced system of three equal atoms at 120 degrees has
    the eigenvalue e^{-3 beta/2} (1/2 + 3 beta/4) > 0: two atoms drift together), so it is a plateau: the
    run kicks the atoms off it and, at t_final = 300, is still near it (leaving takes ~ log(1/kick) / growth,
    thousands of time units)."""
    init = lambda x: 1 + 0.2 * np.cos(3 * np.arctan2(x[:, 1], x[:, 0]))        # noqa: E731
    checks = []
    beta = 5.0
    r = solve_pde(Model(2, beta, "ascent"), 300.0, 64, initial=init, save_every=10.0, nodes=3072,
                  progress=lambda info: checks.append(info) if "check" in info else None)
    assert r.stop_reason == "t_final" and r.t_stop == 300
    assert len(r.plateaus) == 1
    pl = r.plateaus[0]
    assert pl.part == "atoms" and pl.t_entered < pl.t_certified < 300
    assert np.allclose(pl.masses, 1 / 3, atol=1e-12)
    ang = np.sort(np.mod(np.arctan2(pl.positions[:, 1], pl.positions[:, 0]) + 0.1, 2 * np.pi) - 0.1)
    assert np.allclose(ang - ang[0], [0.0, 2 * np.pi / 3, 4 * np.pi / 3], atol=1e-9)
    assert pl.growth == pytest.approx(math.exp(-1.5 * beta) * (0.5 + 0.75 * beta), rel=1e-8)
    # at t_final the run is near the saddle it was kicked off: certified there, unstable
    assert r.terminal is not None and r.terminal.verdict == "unstable" and r.terminal.growth == pytest.approx(pl.growth)
    # the error-estimate rerun goes to t_final, and gets there
    assert checks and {c["t_end"] for c in checks} == {r.t_stop} and checks[-1]["t"] == r.t_stop
    a = r.atoms()
    assert len(a) == 3 and a.diffuse == 0.0 and list(a.counts) == [1024, 1024, 1024]
    assert np.allclose(a.masses, 1 / 3, atol=1e-12)
    # the error estimate (6144 nodes) agrees to its floor, the weight of one node at each end of an arc
    assert a.check_nodes == 6144 and np.all(a.mass_errors <= 2 / 3072 + 1e-15)
    # mass: the weights always sum to 1; the energy of the ascent grows at every snapshot
    lag = [i for i, n in enumerate(r.nodes) if n is not None]
    assert np.allclose(r.mass[lag], 1.0, atol=1e-13)
    assert np.all(np.diff(r.energy) > -1e-12)


@pytest.mark.slow
def test_the_default_relu_run_that_stalled_now_finishes():
    """Circle, beta = 6, ascent, ReLU (2 units), default options, t_final = 12: the Eulerian run hands off
    when 1024 modes no longer hold the jump at the dead-zone boundary, and the continuation carries the
    measure to t_final (measured 3 s here; the Eulerian run alone had reached t = 0.85 in 10 minutes).
    At t = 12 the particle-free answer is one atom at the maximum of V and the mass that started in the
    dead zone, still diffuse; some nodes are still on their way (the run ends on t_final, not stationary)."""
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    r = solve_pde(Model(2, 6.0, "ascent", perceptron=p), 12.0, 256, save_every=1.0)
    assert r.stop_reason == "t_final" and r.t_stop == 12.0
    h = r.lagrangian.handoff
    assert h.reason == "resolution" and h.degree == 1024 and h.nodes == 4096 and h.t < 0.1
    a = r.atoms()
    assert len(a.heavy(0.01)) == 1 and a.masses[0] > 0.5
    assert a.mass_errors is not None and a.mass_errors[0] < 0.01
    assert abs(a.masses.sum() + a.diffuse - 1.0) < 1e-12
    # the atom sits at the maximum of V (where the drift vanishes)
    x = np.stack([np.cos(np.linspace(0, 2 * np.pi, 20001)), np.sin(np.linspace(0, 2 * np.pi, 20001))], 1)
    top = x[np.argmax(p.potential(x))]
    assert math.acos(min(1.0, float(a.positions[0] @ top))) < 1e-3
    # the nodes merged as the atom formed: fewer nodes, same mass
    assert len(r.lagrangian.merges) > 0 and len(r.nodes[-1]["w"]) < 4096


# --- the node measure ------------------------------------------------------------------------------------
def test_handoff_nodes_are_quadratures_of_the_handoff_density():
    """S^1: equal-mass nodes of the inverse CDF integrate the Fourier modes of the density spectrally;
    S^2: the Gauss grid with weights rho x Gauss weight integrates the harmonics exactly (nlat > L)."""
    th = 2 * np.pi * np.arange(4096) / 4096
    dens = np.exp(2 * np.cos(th - 1.0)) + 0.5 * np.exp(np.cos(3 * th))
    c = np.fft.rfft(dens / dens.mean())[:64] / dens.size
    nodes, clipped, _ = handoff_nodes(CircleSpace, c, 64, 2048)
    assert clipped == 0.0 and np.allclose(nodes.w, 1 / 2048)
    z = nodes.x[:, 0] - 1j * nodes.x[:, 1]
    got = np.array([np.sum(nodes.w * z ** k) for k in range(20)])
    assert np.abs(got - c[:20]).max() < 1e-13
    L = 24
    f = lambda x: np.exp(1.5 * x[:, 2] + x[:, 0] * x[:, 1])                     # noqa: E731
    cs = SphereSpace.project(f, L)
    cs = cs / SphereSpace.mass(cs)
    nodes, clipped, _ = handoff_nodes(SphereSpace, cs, L, 2 * 32 ** 2)
    assert clipped == 0.0 and abs(nodes.w.sum() - 1) < 1e-14
    got = 4 * np.pi * sphere.point_coefficients(nodes.x, nodes.w, L)
    assert np.abs(got - cs).max() < 1e-12


@pytest.mark.slow
def test_a_node_group_within_its_mass_error_is_listed_as_not_resolved(tmp_path):
    """A group of nodes whose mass is no larger than its error estimate is not an atom the node count
    resolves. Here (S^2, ascent, GeLU, von Mises data at the north pole, t_final before the collapse) the
    nodes of an arc of the Gauss grid's south polar ring, closer than the default radius from the start and
    left as an arc by the clipping, hold 4e-6 of the mass against an error floor of 2.4e-3 (found by a new
    user). Below 1e-3 of the mass such groups are dust: the summary and `attnpde info` count them apart
    instead of listing them as atoms; grouped without the dust floor, the group is marked not resolved."""
    from solvers.app.config import parse_config
    from solvers.app.info import describe
    from solvers.app.runner import run_config
    from solvers.lagrangian import UNRESOLVED, estimate_atoms, node_atoms, unresolved

    cfg = parse_config('[model]\nd = 3\nbeta = 3.0\nflow = "ascent"\n[model.perceptron]\nunits = 3\n'
                       'activation = "gelu"\nseed = 5\n[initial]\nkind = "von_mises"\nmu = [0.0, 0.0, 1.0]\n'
                       'kappa = 2.0\n[pde]\ndegree = 32\nt_final = 2.0\nsave_every = 0.5\n')
    r = run_config(cfg, tmp_path / "a.h5", progress=False, log=lambda s: None).pde
    a = r.atoms()
    assert isinstance(a, NodeAtoms) and len(a) == 0 and a.dust_groups >= 1 and a.dust < 1e-3
    assert UNRESOLVED not in r.summary() and "dust (groups below 0.001)" in r.summary()
    info = describe(tmp_path / "a.h5")
    assert UNRESOLVED not in info and "dust (node groups below 0.001 of the mass" in info, info
    # without the floor the same groups are atoms, each within its error estimate
    radius = float(r.lagrangian.handoff.atom_radius)
    check = r.lagrangian.check
    fine = Nodes(np.asarray(check.x), np.asarray(check.w), np.asarray(check.count))
    every = estimate_atoms(node_atoms(r.node_measure(-1), radius, dust=0.0),
                           node_atoms(fine, radius / 2 ** 0.5, dust=0.0), check.initial_nodes,
                           floor=2.4e-3, ratio=2.0, order=0.5)
    assert len(every) >= 1 and np.all(every.masses < 1e-3) and unresolved(every.masses, every.mass_errors).all()
    assert not unresolved([0.3, 0.002], [1e-3, 2.4e-3])[0] and unresolved([0.3, 0.002], [1e-3, 2.4e-3])[1]
    assert not unresolved([0.3], None).any()


def test_negative_quadrature_weights_are_clipped_and_reported():
    """A handoff density with a Gibbs undershoot: the negative part is clipped, its mass recorded, and the
    node measure is a probability measure."""
    th = 2 * np.pi * np.arange(4096) / 4096
    step = np.where(np.cos(th) > 0, 1.9, 0.1)
    c = np.fft.rfft(step)[:32] / step.size                      # a truncated jump: it undershoots
    rho = np.fft.irfft(np.r_[c, np.zeros(4096 // 2 + 1 - 32)] * 4096, 4096)
    assert rho.min() < 0
    nodes, clipped, desc = handoff_nodes(CircleSpace, c, 32, 1024)
    assert clipped == pytest.approx(-np.minimum(rho, 0).mean(), rel=1e-3) and "max(rho, 0)" in desc
    assert np.allclose(nodes.w.sum(), 1.0)


def test_atoms_of_a_node_measure():
    """Two collapsed groups (one merged node, one cluster of close nodes) and scattered single nodes."""
    rng = np.random.default_rng(1)
    a = np.array([1.0, 0.0])
    b = np.array([0.0, 1.0])
    near = b + 1e-5 * rng.standard_normal((5, 2))
    far = np.stack([np.cos(np.linspace(3.5, 5.5, 10)), np.sin(np.linspace(3.5, 5.5, 10))], 1)
    x = np.concatenate([a[None], near / np.linalg.norm(near, axis=1)[:, None], far])
    w = np.r_[0.4, np.full(5, 0.08), np.full(10, 0.02)]
    count = np.r_[40, np.ones(5, int), np.ones(10, int)]
    at = node_atoms(Nodes(x, w, count), radius=1e-3)
    assert len(at) == 2 and np.allclose(at.masses, [0.4, 0.4]) and list(at.counts) == [40, 5]
    assert at.diffuse == pytest.approx(0.2)


def test_a_ring_of_nodes_is_not_an_atom_and_a_chain_has_its_extent():
    """S^2: a collapsed atom at the north pole, a ring of 128 nodes 0.01 rad around it (linked to each
    other, not to the atom) and a ring around the south pole: only the first is an atom, the rings' mass
    is diffuse (their mean direction, the pole, is where they have no mass). S^1: a chain of nodes 0.5 r
    apart over 100 r is one atom at its middle, whose extent is its half-length."""
    r = 1e-3
    phi = np.linspace(0.0, 2.0 * np.pi, 128, endpoint=False)

    def ring(z_sign, colat):
        return np.stack([np.sin(colat) * np.cos(phi), np.sin(colat) * np.sin(phi),
                         z_sign * np.cos(colat) * np.ones_like(phi)], axis=1)
    x = np.concatenate([[[0.0, 0.0, 1.0]], ring(1, 0.01), ring(-1, 0.005)])
    w = np.r_[0.9, np.full(128, 0.05 / 128), np.full(128, 0.05 / 128)]
    count = np.r_[400, np.ones(256, int)]
    at = node_atoms(Nodes(x, w, count), radius=r)
    assert len(at) == 1 and at.masses[0] == pytest.approx(0.9) and np.allclose(at.positions[0], [0, 0, 1])
    assert at.diffuse == pytest.approx(0.1) and at.extents[0] == 0.0
    # the S^1 chain: 201 equal nodes at angles -50 r .. 50 r
    theta = np.linspace(-50 * r, 50 * r, 201)
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    at = node_atoms(Nodes(x, np.full(201, 1 / 201), np.ones(201, int)), radius=r)
    assert len(at) == 1 and at.diffuse == 0.0 and np.allclose(at.positions[0], [1, 0], atol=1e-12)
    assert at.extents[0] == pytest.approx(50 * r, rel=1e-9)
    # S^2: 8000 nodes linked around the equator: their mean is a round-off direction on the equator
    phi = np.linspace(0.0, 2.0 * np.pi, 8000, endpoint=False)
    x = np.stack([np.cos(phi), np.sin(phi), np.zeros_like(phi)], axis=1)
    at = node_atoms(Nodes(x, np.full(8000, 1 / 8000), np.ones(8000, int)), radius=r)
    assert len(at) == 0 and at.diffuse == pytest.approx(1.0)


@pytest.mark.slow
def test_data_symmetric_about_an_axis_collapses_onto_the_axis_only():
    """Attention alone (ascent, beta = 3) from a von Mises density about the north pole on S^2: the model
    and the data are invariant under rotations about that axis, so an atom off the axis would come with
    its whole orbit, a ring, which is no point mass. Every atom is at a pole, one at most per pole (rings
    of nodes closing in on the pole were reported as atoms there: four atoms, three at the north pole)."""
    m = Model(3, 3.0, "ascent")
    r = solve_pde(m, 20.0, 32, initial=lambda x: np.exp(3.0 * (x[..., 2] - 1.0)), save_every=5.0,
                  error_estimate=False)
    at = r.atoms()
    assert r.stop_reason == "t_final" and r.lagrangian is not None
    assert np.all(np.abs(np.abs(at.positions[:, 2]) - 1.0) <= 1e-9), at
    assert len(set(np.sign(at.positions[:, 2]))) == len(at), at
    assert at.masses[0] >= 0.95 and at.positions[0, 2] > 0, at


# --- noise: no continuation ------------------------------------------------------------------------------
def test_noise_has_no_continuation():
    m = Model(2, 4.0, "ascent", noise=0.05, perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    with pytest.raises(ValueError, match="noise .* does not have: use continuation='none'"):
        solve_pde(m, 1.0, 64, continuation="lagrangian")
    r = solve_pde(m, 0.2, 64, max_degree=128, tail_max=1e-2)        # the default with noise: none
    assert r.options["continuation"] == "none" and r.lagrangian is None


def test_compare_measures_the_node_measure_itself():
    """Forced handoff at t = 1e-9 from uniform data: the node measure is the equispaced midpoint grid, which
    is also what quadrature particles start from, and both move by the same Dormand–Prince steps of the
    same field. compare() then sees two nearly equal measures — W1 (exact between point sets), CDF drift,
    atoms (cap masses of the points, not of the truncated series of near-Dirac masses)."""
    from solvers import compare, simulate_particles

    m = Model(2, 5.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    r = solve_pde(m, 20.0, 64, save_every=5.0, handoff_at=1e-9, nodes=2048, error_estimate=False)
    p = simulate_particles(m, 2048, t_final=20.0, init="quadrature", integrator="adaptive", rtol=1e-6,
                           atol=1e-8, save_every=5.0)
    c = compare(r, p)
    assert np.array_equal(c.t, [0, 5, 10, 15, 20])
    assert np.max(c.w1[1:]) < 1e-4 and np.max(c.mmd[1:]) < 1e-4
    assert np.all(np.isnan(c.cdf_drift[1:]))          # not defined for a measure with atoms
    # ... and the summary a user reads says so instead of printing nan
    assert "nan" not in c.summary() and "CDF drift - (PDE past its handoff" in c.summary()
    # at t = 20 the mass at the maximum of V is an atom in both; the dead-zone mass is still gathering
    assert len(c.matched_atoms) == 1 and not c.unmatched_pde and not c.unmatched_particles
    for pair in c.matched_atoms:
        assert abs(pair["mass_difference"]) <= 2 / 2048 and pair["position_error"] < 1e-4


def test_an_interrupt_in_the_error_estimate_rerun_keeps_the_solution_time():
    """Ctrl-C during the error-estimate rerun (twice the nodes, from the handoff): the run ends
    "interrupted" at the time its own solution had reached (t_final), not at the handoff time where the
    rerun was, and its message says where the interrupt came."""
    def progress(info):
        if "check" in info and info["t"] > 0.5:
            raise KeyboardInterrupt
    m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    r = solve_pde(m, 2.0, 128, save_every=0.5, progress=progress)
    assert r.stop_reason == "interrupted" and r.t_stop == 2.0 == r.t[-1], (r.t_stop, r.message)
    assert r.lagrangian.check is None and "error-estimate rerun" in r.message
    assert r.t_handoff < 0.1


def test_an_interrupt_in_the_node_phase_reports_the_time_reached_and_the_restart_point():
    """Ctrl-C in the node phase (past the handoff): the run ends "interrupted" at the nodes' time, not at
    the handoff time, and its message names the last snapshot, where a resume of its archive continues."""
    def progress(info):
        if "check" not in info and info["t"] > 1.2:
            raise KeyboardInterrupt
    m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    r = solve_pde(m, 2.0, 128, save_every=0.5, progress=progress)
    assert r.stop_reason == "interrupted" and r.t_handoff < 0.1
    assert 1.2 < r.t_stop < 2.0, (r.t_stop, r.message)
    assert r.t[-1] == 1.0 and r.message.endswith("a resume continues from the last snapshot, at t = 1 (or from "
                                                 "the archive's checkpoint, if later)"), r.message


@pytest.mark.parametrize("order, ratio", [(1.0, 2.0), (0.5, 2.0), (0.5, 2.25)])
def test_the_error_estimate_is_exact_for_a_quantity_converging_at_its_order(order, ratio):
    """Richardson: masses m + C N^-order at N and ratio N nodes, positions off by D N^-order: the estimate
    from the two runs is the error at N itself (the difference alone is short of it by 1 - ratio^-order)."""
    N, C, D = 4096, 3.0, 2.0
    m, theta = np.array([0.6, 0.3]), np.array([0.5, 2.5])
    def atoms(n):
        off = n ** -order
        pos = np.stack([np.cos(theta + D * off), np.sin(theta + D * off)], axis=1)
        return NodeAtoms(pos, m + C * off, np.array([10, 10]), 0.1 - 2 * C * off, 1e-4)
    est = estimate_atoms(atoms(N), atoms(ratio * N), int(ratio * N), ratio=ratio, order=order)
    assert np.allclose(est.mass_errors, C * N ** -order, rtol=1e-9)
    assert np.allclose(est.position_errors, D * N ** -order, rtol=1e-6)
    assert est.diffuse_error == pytest.approx(2 * C * N ** -order, rel=1e-9)


def test_closest_chord_on_the_sphere_by_a_strip_search_is_every_pairs_minimum():
    """The merge's closest chord on S^2 (a strip search along a projection, the k-d tree where the strip
    would take too many offsets): against the minimum over every pair, a lower bound at most 2e-15 below
    it, on uniform and clustered sets at several scales, with coincident points, and on points strung
    along a meridian (where the strip gives up and the tree answers exactly)."""
    from solvers import lagrangian

    rng = np.random.default_rng(5)
    centres = rng.standard_normal((7, 3))
    sets = []
    for n in (2, 3, 50, 1200):
        u = rng.standard_normal((n, 3))
        sets.append(u)
        for s in (1e-2, 1e-4, 1e-7):
            sets.append(centres[rng.integers(0, 7, n)] + s * rng.standard_normal((n, 3)))
    sets.append(centres[rng.integers(0, 7, 300)])                            # coincident points
    th = np.linspace(0.0, np.pi, 1200)
    meridian = np.stack([np.sin(th), np.zeros_like(th), np.cos(th)], axis=1)
    sets.append(meridian)
    for x in sets:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
        np.fill_diagonal(d, np.inf)
        low = lagrangian._closest_chord(x)
        assert 0.0 <= d.min() - low <= 2e-15, (len(x), d.min(), low)
    assert lagrangian._strip_closest_chord(meridian) is None               # left to the tree


def test_merging_with_a_carried_slack_makes_the_merges_of_a_search_at_every_step():
    """The node merge skips its nearest-pair search while a bound (the last closest chord minus the link chord,
    less twice every step's largest move) stays positive: by the triangle inequality no pair can have come
    within merge_tol. Nodes drifting towards a few centres (so pairs keep coming within merge_tol), on S^1
    and S^2: the merges with the carried bound are those of a search at every step, node for node, and some
    searches are skipped."""
    from solvers import lagrangian

    for d in (2, 3):
        rng = np.random.default_rng(d)
        x = rng.standard_normal((400, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        centres = x[:5].copy()
        nodes = lagrangian.Nodes(x, np.full(400, 1.0 / 400), np.ones(400, dtype=np.int64))
        carried, fresh, slack, searches, skipped = nodes, nodes, None, 0, 0
        calls = lagrangian._closest_chord

        def counted(p, *rest):
            nonlocal searches
            searches += 1
            return calls(p, *rest)
        lagrangian._closest_chord = counted
        try:
            for step in range(300):
                # every node moves a little towards its nearest centre (and a little at random)
                pull = centres[np.argmax(carried.x @ centres.T, axis=1)]
                new = carried.x + 0.03 * (pull - carried.x) + 1e-4 * rng.standard_normal(carried.x.shape)
                new /= np.linalg.norm(new, axis=1, keepdims=True)
                slack = lagrangian._moved(slack, new, carried.x)
                before = searches
                carried, m1, slack = lagrangian._merge(lagrangian.Nodes(new, carried.w, carried.count), 1e-3, slack)
                skipped += searches == before
                fresh, m2, _ = lagrangian._merge(lagrangian.Nodes(new, fresh.w, fresh.count), 1e-3, None)
                assert m1 == m2 and np.array_equal(carried.x, fresh.x) and np.array_equal(carried.count, fresh.count)
        finally:
            lagrangian._closest_chord = calls
        assert len(carried) < 100 and skipped > 20, (len(carried), skipped)   # merges made, searches skipped


def test_node_groups_of_a_run_that_did_not_become_stationary_say_so(tmp_path):
    """The summary and `attnpde info` of a continuation that ended at t_final (not "stationary") say that
    its node groups are the measure at that time, not terminal atoms; a stationary run's do not."""
    from solvers.app.info import describe_pde

    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    moving = solve_pde(Model(2, 1.0, "ascent", perceptron=p), 1.0, 128)
    assert moving.stop_reason == "t_final" and moving.lagrangian is not None
    assert "not stationary at t_final: these node groups are the measure at t = 1," in moving.summary()
    init = lambda x: 1 + 0.2 * np.cos(3 * np.arctan2(x[:, 1], x[:, 0]))        # noqa: E731
    # three equal atoms at 120 degrees: at t_final the run is near that certified saddle (a plateau)
    near = solve_pde(Model(2, 5.0, "ascent"), 300.0, 64, initial=init, nodes=1536, error_estimate=False)
    assert near.stop_reason == "t_final" and near.terminal is not None and near.terminal.verdict == "unstable"
    assert "not stationary" not in near.summary() and "unstable (a saddle)" in near.summary()
    still = solve_pde(Model(2, 5.0, "ascent"), math.inf, 64, initial=init, nodes=1536, error_estimate=False)
    assert still.stop_reason == "stationary" and "not stationary" not in still.summary()
    for r, said in ((moving, True), (still, False)):
        a = r.atoms()
        atoms = {"pde": (a.positions, a.masses), "pde:attrs": {"kind": "node groups", "radius": a.radius,
                                                               "diffuse": a.diffuse}}
        assert any("not stationary at t_final" in line for line in describe_pde(r, atoms)) is said
