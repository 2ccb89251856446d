"""Run the attnpde command and signal this process once a run's accepted steps reach time T.

    python tests/signal_after_time.py T SIGNAL attnpde-arguments...

The signal is sent once, from the first accepted step (spectral, node or particle) whose time is >= T,
so where the run is cut is fixed by the run, not by how fast the machine is. Used by
tests/test_interrupts.py (a run stopped between two snapshots keeps its state there).
"""
import os
import sys

from solvers import eulerian, lagrangian, particles

_sent = []


def _signalling(accept):
    def wrapped(self, *a, **k):
        out = accept(self, *a, **k)
        if self.t >= float(sys.argv[1]) and not _sent:
            _sent.append(True)
            os.kill(os.getpid(), int(sys.argv[2]))
        return out
    return wrapped


for cls in (eulerian.EulerianPhase, lagrangian.LagrangianPhase, particles.ParticleRun):
    cls.accept = _signalling(cls.accept)

if __name__ == "__main__":
    from solvers.app.cli import main
    sys.exit(main(sys.argv[3:]))
