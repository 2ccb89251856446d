"""Every default of a run is resolved once, in its spec: a configuration file and the Python API give the same
spec; what a file writes out equal to a default changes nothing; a sweep's member is its spec at another beta."""
import math

import numpy as np
import pytest

from solvers import Model, Perceptron, simulate_particles, solve_pde
from solvers.app.branch import parse_branch_config
from solvers.app.config import parse_config
from solvers.app.sweep import member_config
from solvers.branch_spec import BranchSpec
from solvers.landscape import ExtremumSpec
from solvers.particle_spec import ParticleSpec
from solvers.pde_spec import PDESpec

MODEL = '[model]\nd = {d}\nbeta = 2.0\nflow = "ascent"\n[model.perceptron]\nunits = 2\nactivation = "relu"\n'
MINIMAL = "[pde]\ndegree = 16\nt_final = 1.0\n[particles]\nn = 50\nt_final = 1.0\n"


@pytest.mark.parametrize("d", [2, 3])
def test_a_minimal_configuration_and_the_python_api_resolve_the_same_specs(d):
    config = parse_config(MODEL.format(d=d) + MINIMAL)
    model = config.model
    assert config.pde == PDESpec.resolve(model, 1.0, 16)
    assert config.particles == ParticleSpec.resolve(model, 50, 1.0)
    # and the solver's own record of its options is the spec's
    run = solve_pde(model, 0.01, 16)
    spec = PDESpec.resolve(model, 0.01, 16)
    assert run.options == spec.options.to_dict()
    particles = simulate_particles(model, n=20, t_final=0.05)
    resolved = ParticleSpec.resolve(model, 20, 0.05)
    assert (particles.integrator, particles.dt, particles.seed) == (resolved.integrator, resolved.dt, resolved.seed)


def test_the_documented_defaults_are_those_resolved():
    """docs/numerics.md and PDEOptions: the continuation hands off at 1024 Fourier modes on S^1 and L = 127 on
    S^2 (or the starting degree, if above), with 4096 and 8192 nodes whose step tolerance is 2.5e-3 of their
    mean spacing (2 pi / 4096 on S^1); the particles step by 0.1 and, with a stopping rule, save every 10 steps."""
    circle = PDESpec.resolve(Model(2, 1.0, "ascent"), 1.0, 16)
    sphere = PDESpec.resolve(Model(3, 1.0, "ascent"), 1.0, 16)
    assert (circle.handoff_degree, circle.nodes, sphere.handoff_degree, sphere.nodes) == (1024, 4096, 127, 8192)
    assert PDESpec.resolve(Model(3, 1.0, "ascent"), 1.0, 200).handoff_degree == 200
    assert math.isclose(circle.options.node_rtol, 2.5e-3 * 2 * math.pi / 4096, rel_tol=1e-12)
    assert circle.options.node_atol == pytest.approx(1e-2 * circle.options.node_rtol)
    # with noise there are no characteristics to follow: no continuation, no cap but max_degree
    noisy = PDESpec.resolve(Model(2, 1.0, "ascent", noise=0.1), 1.0, 16)
    assert not noisy.continues and noisy.cap == noisy.max_degree and noisy.nodes is None
    rule = ParticleSpec.resolve(Model(2, 1.0, "ascent"), 10, 5.0, stop=True)
    assert rule.dt == 0.1 and rule.save_every == pytest.approx(1.0)


def test_writing_a_default_out_changes_no_spec():
    base = MODEL.format(d=2) + MINIMAL
    written = base.replace("t_final = 1.0\n[particles]", "t_final = 1.0\ntail_tol = 1e-4\nnodes = 4096\n"
                           "continuation = \"lagrangian\"\n[particles]")
    assert written != base
    a, b = parse_config(base), parse_config(written)
    # the record the archive keeps and a resume compares (the options object keeps max_degree, output_points
    # and nodes as given, as every restart state records them)
    assert a.pde.to_dict() == b.pde.to_dict() and a.pde.cap == b.pde.cap


def test_a_sweep_member_is_the_spec_at_another_beta():
    config = parse_config(MODEL.format(d=2) + MINIMAL + "[particles.stop]\n")
    member = member_config(config, 7.0)
    assert member.model.beta == 7.0 and member.model.perceptron is config.model.perceptron
    assert member.pde == PDESpec.resolve(member.model, 1.0, 16)
    assert member.particles == ParticleSpec.resolve(member.model, 50, 1.0, stop={})
    # the member's text (its archive's) is the configuration at that beta
    again = parse_config(member.text)
    assert again.model.beta == 7.0 and again.pde.to_dict() == member.pde.to_dict()
    assert again.particles.to_dict() == member.particles.to_dict()


def test_snapshot_times_are_those_the_solvers_take():
    model = Model(2, 1.0, "ascent")
    spec = PDESpec.resolve(model, 1.0, 16, save_every=0.3)
    run = solve_pde(model, 1.0, 16, save_every=0.3)
    assert np.array_equal(spec.snapshot_times(), run.t)
    parts = ParticleSpec.resolve(model, 10, 1.0, save_every=0.3)
    assert np.array_equal(parts.snapshot_times(), simulate_particles(model, n=10, t_final=1.0, save_every=0.3).t)
    # to the certified end: 100 snapshots save_every apart, then twice as far apart for every next hundred
    inf = PDESpec.resolve(model, math.inf, 16, save_every=0.5).snapshot_times()
    assert inf[100] == pytest.approx(50.0) and inf[101] - inf[100] == pytest.approx(1.0)


def test_a_branch_configuration_and_the_python_api_resolve_the_same_spec():
    text = ('[model]\nd = 2\nbeta = 4.0\nflow = "ascent"\n[branch]\nmode = 1\n')
    config = parse_branch_config(text)
    assert config.spec == BranchSpec.resolve(config.model, 1)
    # S^1 without a perceptron is even: the cosines alone; the degrees are the branch's defaults
    assert (config.spec.representation, config.spec.degree, config.spec.options.max_degree) == ("even", 64, 256)


def test_an_extremum_spec_refuses_what_the_extremum_does_not_cover():
    p = Perceptron.random(2, 2, "relu", 1.0, seed=1)
    assert ExtremumSpec.resolve(Model(2, 2.0, "ascent", perceptron=p)).route == "auto"
    with pytest.raises(ValueError, match="noise"):
        ExtremumSpec.resolve(Model(2, 2.0, "ascent", noise=0.1))
