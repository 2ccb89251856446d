"""Runs to their certified end (``t_final = inf``, solvers.terminal): the certificate, the plateaus on the way,
their exact values, and a resume of such a run.

The antipodal pair. Pure attention (USA, gamma = 1, no perceptron) in ascent from rho_0 = 1 + a cos(2 theta)
keeps the symmetry theta -> theta + pi, so the mass gathers into two antipodal atoms of mass 1/2: a stationary
state with E = (1/2) sum_ij m_i m_j e^{beta(<x_i,x_j> - 1)} / beta = (1 + e^{-2 beta}) / (4 beta). It is a
saddle: moving both atoms by the same tangent vector brings them together at the rate e^{-2 beta}
(tests/test_atomic.py derives it). The kick breaks the symmetry, the atoms merge, and the end is one atom of
mass 1, E = 1 / (2 beta), whose pull on nearby mass is -gamma m = -1 (stable; the rotation is neutral).
"""
import math
from pathlib import Path

import numpy as np
import pytest

from solvers import Model, Perceptron, solve_pde

BETA = 1.0
PAIR = dict(initial=lambda x: 1 + 0.5 * (x[:, 0] ** 2 - x[:, 1] ** 2), save_every=1.0, nodes=256, handoff_degree=128)


def test_an_antipodal_pair_is_a_plateau_and_one_atom_the_certified_end():
    r = solve_pde(Model(2, BETA, "ascent"), math.inf, 32, **PAIR)
    assert r.stop_reason == "stationary" and "certified stationary" in r.message
    assert len(r.plateaus) == 1
    pl = r.plateaus[0]
    assert pl.part == "atoms" and pl.kick == 1e-4 and pl.t_entered <= pl.t_certified < r.t_stop
    assert np.allclose(pl.masses, 0.5, atol=1e-12)
    assert pl.positions[0] @ pl.positions[1] == pytest.approx(-1.0, abs=1e-12)
    assert pl.growth == pytest.approx(math.exp(-2 * BETA), rel=1e-9)
    assert pl.energy == pytest.approx((1 + math.exp(-2 * BETA)) / (4 * BETA), rel=1e-12)
    # the direction moves both atoms alike (the symmetric mode), by at most the kick
    assert np.allclose(pl.direction[0], pl.direction[1], atol=1e-9)
    T = r.terminal
    assert T is not None and T.stable and T.verdict == "stable" and len(T) == 1 and T.t == r.t_stop
    assert T.masses[0] == pytest.approx(1.0, abs=1e-12) and T.max_speed <= 1e-10
    assert T.growth == pytest.approx(-1.0, rel=1e-9) and T.neutral == 1
    assert T.energy == pytest.approx(1 / (2 * BETA), rel=1e-12)
    # every node ended in the atom, and the rerun at twice the nodes certified the same end
    assert int(T.counts[0]) == 256 and T.check_nodes == 512 and T.mass_errors[0] <= 2 / 256 + 1e-15
    assert "terminal state: certified" in r.summary() and "plateau 1" in r.summary()
    # the node groups at the end are the certified atoms, with the rerun's error bars (its own end against ours)
    A = r.atoms()
    assert len(A) == 1 and A.masses[0] == pytest.approx(1.0, abs=1e-12) and A.diffuse == pytest.approx(0.0, abs=1e-12)
    assert A.check_nodes == 512 and A.mass_errors is not None and A.mass_errors[0] <= 2 / 256 + 1e-15


@pytest.mark.cpu_dependent
def test_a_run_without_end_resumed_from_a_snapshot_is_the_uninterrupted_run():
    """Restart states carry the certification's schedule, the plateaus and the Rosenbrock steps' mode: a
    run resumed from a snapshot after its plateau ends at the same time, with the same bits."""
    model = Model(2, BETA, "ascent")
    states = []
    ref = solve_pde(model, math.inf, 32, callback=lambda snap: states.append(snap["restart"]),
                    error_estimate=False, **PAIR)
    after = [s for s in states if s.get("plateaus")]
    assert after, "a snapshot after the plateau"
    mid = after[len(after) // 2]
    again = solve_pde(model, math.inf, 32, restart=mid, error_estimate=False, **PAIR)
    assert again.stop_reason == ref.stop_reason == "stationary" and again.t_stop == ref.t_stop
    assert np.array_equal(again.terminal.positions, ref.terminal.positions)
    assert [p.to_dict() for p in again.plateaus] == [p.to_dict() for p in ref.plateaus]
    assert again.lagrangian.node_nsteps == ref.lagrangian.node_nsteps


def test_a_density_at_rest_ends_a_run_without_end():
    """Pure attention in descent spreads any perturbation back to the uniform density (every mode decays at
    l (l + d - 2) gamma lambda_l / beta): no atom forms, the density comes to rest, and a run to t_final =
    inf ends there, "stationary", with no certified atomic state."""
    r = solve_pde(Model(2, 1.0, "descent"), math.inf, 32, initial=lambda x: 1 + 1e-3 * x[:, 0])
    assert r.stop_reason == "stationary" and "the density is at rest" in r.message
    assert r.terminal is None and r.lagrangian is None
    assert np.abs(r.density[-1] - 1.0).max() < 1e-7


def test_t_final_inf_is_refused_where_no_terminal_state_is_certified():
    with pytest.raises(ValueError, match="t_final = inf runs until the terminal state is certified"):
        solve_pde(Model(2, 1.0, "ascent", noise=0.1), math.inf, 32)
    with pytest.raises(ValueError, match=r"t_final must be a number > 0 or infinity .*, got -inf"):
        solve_pde(Model(2, 1.0, "ascent"), -math.inf, 32)


def test_the_command_runs_to_the_certified_end_and_archives_it(tmp_path):
    """`pde.t_final = inf` in TOML; /pde/terminal and /pde/plateaus read back as the run wrote them, and
    `attnpde info` prints them."""
    from solvers.app.archive import load
    from solvers.app.cli import main
    from solvers.app.info import describe

    cfg = tmp_path / "pair.toml"
    cfg.write_text('[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n'
                   '[initial]\nkind = "zonal_harmonic"\ndegree = 2\namplitude = 0.5\n'
                   "[pde]\ndegree = 32\nt_final = inf\nsave_every = 1.0\nnodes = 256\nhandoff_degree = 128\n")
    assert main(["run", str(cfg), "--quiet"]) == 0
    run = load(tmp_path / "pair.h5")
    # the same run in memory (its initial density is the configuration's, so the same bits)
    from solvers.app.config import load_config
    from solvers.pde import prepare_spec
    config = load_config(cfg)
    ref = prepare_spec(config.pde).run()
    T, R = run.pde.terminal, ref.terminal
    assert T.t == R.t and np.array_equal(T.positions, R.positions) and np.array_equal(T.masses, R.masses)
    assert T.verdict == R.verdict and np.array_equal(T.eigenvalues, R.eigenvalues)
    assert np.array_equal(T.mass_errors, R.mass_errors)
    assert [p.to_dict() for p in run.pde.plateaus] == [p.to_dict() for p in ref.plateaus]
    text = describe(tmp_path / "pair.h5")
    assert "terminal state: certified" in text and "plateau 1:" in text


@pytest.mark.slow
def test_circle_s2_descent_reaches_a_certified_stable_end_with_all_mass_in_atoms():
    """The main paper's setup S2 on the circle (descent, ReLU, 2 units, seed 111) at beta = 5: the mass in
    the dead zone crystallises into atoms over thousands of time units; the run goes on until all of it
    has collapsed and certifies the end: stable, every node in an atom."""
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    r = solve_pde(Model(2, 5.0, "descent", perceptron=p), math.inf, 128)
    T = r.terminal
    assert r.stop_reason == "stationary" and T is not None and T.stable and T.max_speed <= 1e-10
    assert int(T.counts.sum()) == 4096 and T.masses.sum() == pytest.approx(1.0, abs=1e-12)
    assert len(T) == 6 and T.t > 4000
    assert np.all(T.mass_errors < 0.01)
