"""The error-estimate rerun beside the run (``solvers.rerun``): it gives the numbers of the rerun run after the
run, bit for bit, whether it was kept or started again; an exception or an interrupt of the run stops it and
leaves no thread behind; a run interrupted in its node phase resumes to the uninterrupted run's error bars.

The two ways are compared on one machine: the rerun's phase is built and stepped the same way in both, so any
difference would be a thread sharing state with the run, not round-off."""
import math
import os
import signal
import threading

import numpy as np
import pytest

import solvers.pde
from solvers import Model, Perceptron, solve_pde

#: the antipodal pair of tests/test_terminal.py: certified at t = 114 (one atom of mass 1)
PAIR = dict(initial=lambda x: 1 + 0.5 * (x[:, 0] ** 2 - x[:, 1] ** 2), save_every=1.0, nodes=256, handoff_degree=128)
#: the node phase of tests/test_interrupts.py: handoff at t ~ 0.02, to t_final = 2 uncertified
NODES = (Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111)), 2.0, 128)


def _rerun_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "attnpde-rerun"]


@pytest.fixture
def started(monkeypatch):
    """The background reruns started (and whether each was kept), counted."""
    log = []

    class Counted(solvers.pde.BackgroundRerun):
        def start(self):
            log.append(self)
            return super().start()

        def wait(self, progress):
            self.kept = True
            return super().wait(progress)
    monkeypatch.setattr(solvers.pde, "BackgroundRerun", Counted)
    monkeypatch.setattr(solvers.pde, "spare_core", lambda: True)
    return log


def _same_check(a, b) -> None:
    ca, cb = a.lagrangian.check, b.lagrangian.check
    assert ca is not None and cb is not None
    for key in ("x", "w", "count"):
        assert np.array_equal(getattr(ca, key), getattr(cb, key)), key
    assert (ca.t, ca.nsteps, ca.stop_reason, ca.initial_nodes) == (cb.t, cb.nsteps, cb.stop_reason, cb.initial_nodes)
    assert (ca.terminal is None) == (cb.terminal is None)
    if ca.terminal is not None:
        da, db = ca.terminal.to_dict(), cb.terminal.to_dict()
        assert da.keys() == db.keys()
        for key in da:
            assert np.array_equal(np.asarray(da[key]), np.asarray(db[key])), key
    ea, eb = a.atoms(), b.atoms()
    assert np.array_equal(ea.masses, eb.masses) and np.array_equal(ea.mass_errors, eb.mass_errors)
    if a.terminal is not None:
        assert np.array_equal(a.terminal.mass_errors, b.terminal.mass_errors)
        assert np.array_equal(a.terminal.position_errors, b.terminal.position_errors)


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("case, kept", [("certified end", True), ("t_final reached", True),
                                        ("certified before t_final", False)])
def test_the_rerun_beside_the_run_has_the_numbers_of_the_rerun_after_it(case, kept, started, monkeypatch):
    """The rerun started at the handoff expects the end a run to t_final = inf has (certified) or a finite
    t_final has (reached); where the run ended otherwise (certified before t_final) it is dropped and run
    again after the run. Either way its numbers, and so the error bars, are those of the rerun run after the
    run alone."""
    if case == "certified end":
        args, kw = (Model(2, 1.0, "ascent"), math.inf, 32), PAIR
    elif case == "t_final reached":
        args, kw = NODES, dict(save_every=0.5)
    else:
        args, kw = (Model(2, 1.0, "ascent"), 200.0, 32), PAIR
    beside = solve_pde(*args, **kw)
    assert len(started) == 1 and getattr(started[0], "kept", False) == kept and not _rerun_threads()
    monkeypatch.setattr(solvers.pde, "spare_core", lambda: False)
    after = solve_pde(*args, **kw)
    assert len(started) == 1
    assert beside.stop_reason == after.stop_reason == ("t_final" if case == "t_final reached" else "stationary")
    assert (beside.lagrangian.check.terminal is None) == (case == "t_final reached")
    _same_check(beside, after)


def test_an_exception_in_the_run_stops_the_rerun_beside_it(started):
    """A callback that raises in the node phase: the exception reaches the caller, and the rerun's thread has
    stopped by then."""
    def progress(info):
        if "check" not in info and info["t"] > 1.0:
            raise RuntimeError("the caller's own error")
    with pytest.raises(RuntimeError, match="the caller's own error"):
        solve_pde(*NODES, save_every=0.5, progress=progress)
    assert len(started) == 1 and not getattr(started[0], "kept", False)
    assert started[0].request.cancelled and not _rerun_threads()


@pytest.mark.cpu_dependent
def test_ctrl_c_in_the_node_phase_stops_the_rerun_and_the_resume_has_the_same_error_bars(started):
    """Ctrl-C in the node phase stops the run after its step and the rerun beside it with it (no thread is
    left); the resume starts the rerun again and ends with the uninterrupted run's atoms and error bars."""
    full = solve_pde(*NODES, save_every=0.5)
    sent = []

    def progress(info):
        if "check" not in info and info["t"] > 1.2 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
    cut = solve_pde(*NODES, save_every=0.5, progress=progress)
    assert cut.stop_reason == "interrupted" and cut.lagrangian.check is None and not _rerun_threads()
    assert len(started) == 2 and not getattr(started[1], "kept", False)
    rest = solve_pde(*NODES, save_every=0.5, restart=cut.restart)
    assert len(started) == 3 and started[2].kept and not _rerun_threads()
    _same_check(rest, full)
