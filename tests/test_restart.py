"""The typed restart states (solvers.restart): each dict a run hands out is read back to the same dict, a dict
written before a key (or the version) existed still reads, one of a newer version is refused; a run resumed
from a state read back is the uninterrupted run."""
import math

import numpy as np
import pytest

from solvers import Model, Perceptron, simulate_particles, solve_pde
from solvers.restart import EulerianState, LagrangianState, ParticleState, pde_state_from_dict

MODEL = Model(2, 4.0, "ascent", perceptron=Perceptron.random(2, 2, "tanh", 1.0, seed=5))
RUN = dict(save_every=0.1, handoff_at=0.2, nodes=256, error_estimate=False)

#: keys that came after the first restart states (read with the defaults of a run without them)
NEWER_PDE = ("version", "last_snapshot_t", "step_log", "initial", "refinements", "grids", "settings")
NEWER_NODES = ("merges", "implicit", "t_begin", "next_attempt", "quiet", "samples", "plateaus", "diffuse_log",
               "terminal", "ended")


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert isinstance(b[k], np.ndarray) and a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        else:
            assert type(a[k]) is type(b[k]) and (a[k] == b[k] or a[k] != a[k] and b[k] != b[k]), k


@pytest.fixture(scope="module")
def pde_states():
    states = []
    full = solve_pde(MODEL, 0.4, 32, callback=lambda snap: states.append(snap["restart"]), **RUN)
    assert full.t_handoff == 0.2 and len(states) == 5
    return full, states


def test_pde_states_read_back_to_the_same_dict(pde_states):
    _, states = pde_states
    kinds = [type(pde_state_from_dict(s)) for s in states]
    assert kinds == [EulerianState] * 3 + [LagrangianState] * 2
    for s in states:
        assert s["version"] == 1
        _same(s, pde_state_from_dict(s).to_dict())


@pytest.mark.cpu_dependent
def test_an_older_pde_state_resumes_as_the_uninterrupted_run(pde_states):
    full, states = pde_states
    for k in (1, 3):
        old = {key: v for key, v in states[k].items() if key not in NEWER_PDE + NEWER_NODES}
        rest = solve_pde(MODEL, 0.4, 32, restart=old, **RUN)
        assert np.array_equal(rest.t, full.t[k + 1:]) and np.array_equal(rest.coeffs[-1], full.coeffs[-1])
        assert rest.restart["initial"] == "restart" and rest.restart["version"] == 1


def test_a_newer_state_is_refused_naming_its_version(pde_states):
    _, states = pde_states
    for s, name in ((states[1], "EulerianState"), (states[3], "LagrangianState")):
        with pytest.raises(ValueError, match=rf"^the restart state \({name}\) has version 2, newer than the "
                                             r"version 1 this software reads"):
            solve_pde(MODEL, 0.4, 32, restart={**s, "version": 2}, **RUN)


@pytest.mark.cpu_dependent
def test_particle_states_read_back_and_resume():
    m = Model(2, 4.0, "ascent")
    kw = dict(n=64, t_final=1.0, integrator="adaptive", save_every=0.25, seed=3)
    states = []
    full = simulate_particles(m, callback=lambda snap: states.append(snap["restart"]), **kw)
    s = states[2]
    assert s["version"] == 1 and math.isfinite(s["facold"])
    _same(s, ParticleState.from_dict(s).to_dict())
    old = {k: v for k, v in s.items() if k not in ("version", "last_snapshot_t", "stiffness", "settings")}
    rest = simulate_particles(m, restart=old, **{k: v for k, v in kw.items() if k != "n"})
    assert np.array_equal(rest.x[-1], full.x[-1]) and rest.nsteps == full.nsteps
    with pytest.raises(ValueError, match=r"\(ParticleState\) has version 3"):
        simulate_particles(m, restart={**s, "version": 3}, **{k: v for k, v in kw.items() if k != "n"})
