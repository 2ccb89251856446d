import os

# Keep BLAS/OpenMP from oversubscribing the 2-core CI machine: set before numpy loads OpenBLAS, which reads
# it once (pytest run directly, without scripts/test, which exports it)
os.environ.setdefault("OMP_NUM_THREADS", "2")

import signal  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# A shell starts background jobs with SIGINT ignored, and Python and the commands the tests start keep that;
# the tests of Ctrl-C need the ordinary disposition whichever way the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="run the slow lane too (tests marked slow); without it only the fast lane runs")


def pytest_collection_modifyitems(config, items):
    """The fast lane leaves out tests marked ``slow`` unless ``--all`` is given, a ``-m`` expression chooses,
    or the test is named on the command line by its node id."""
    if config.getoption("--all") or config.getoption("markexpr"):
        return
    named = [a.split("[")[0] for a in config.args if "::" in a]
    keep, slow = [], []
    for item in items:
        base = item.nodeid.split("[")[0]
        explicit = any(a.endswith(base) or base.endswith(a) for a in named)
        (slow if item.get_closest_marker("slow") and not explicit else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep


@pytest.fixture
def check_step_diagnostics():
    """A check for either discretisation (circle, sphere): the diagnostics its last stage records while forming
    the flux in place (min/max rho, max |v|) are those of rho and of the velocity computed on their own
    (``velocity()``, Model.velocity into another buffer), and recording them leaves the right-hand side as it
    is. ``speed(v)`` is |v| on the grid from ``velocity()``'s v."""
    def check(disc, u, speed):
        plain = disc.rhs(0.0, u, False)
        diag = disc.diagnostics(u)
        assert np.array_equal(disc.rhs(0.0, u, True), plain)
        assert np.array_equal(plain, disc.rhs_flux(0.0, u) * disc.divergence)
        rho, v, _ = disc.velocity(u)
        assert diag["min_density"] == rho.min() and diag["max_density"] == rho.max()
        assert diag["vmax"] == speed(v).max()
    return check
