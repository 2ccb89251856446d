"""The stepping core: orders of convergence and exact treatment of a stiff diagonal linear part."""
import math

import numpy as np
import pytest

from solvers.model import Model
from solvers.perceptron import Perceptron
from solvers.stepping import BS32, DP54, RK4, IFRungeKutta, Integration, StepController


def exact(a, u0, t):
    """u' = a u + sin t, u(0) = u0."""
    B = -1 / (1 + a * a)
    A = -a / (1 + a * a)
    return (u0 - B) * np.exp(a * t) + A * np.sin(t) + B * np.cos(t)


def integrate(tab, a, h, T=1.0, lin=True):
    a = np.asarray(a, dtype=float)
    if lin:
        rk = IFRungeKutta(lambda t, u, last: np.sin(t) * np.ones_like(u), tab, lin=a)
    else:
        rk = IFRungeKutta(lambda t, u, last: a * u + np.sin(t), tab)
    u = np.ones_like(a)
    f = None
    n = round(T / h)
    for i in range(n):
        u, f, _ = rk.step(i * h, u, h, f)
    return u


@pytest.mark.parametrize("tab, order", [(DP54, 5), (BS32, 3), (RK4, 4)])
@pytest.mark.parametrize("lin", [True, False])
def test_convergence_order(tab, order, lin):
    a = np.array([-1.3, 0.4])
    errs = [np.abs(integrate(tab, a, h, lin=lin) - exact(a, 1.0, 1.0)).max() for h in (0.1, 0.05, 0.025)]
    rates = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert all(abs(r - order) < 0.35 for r in rates), (errs, rates)


def test_integrating_factor_is_stable_and_exact_for_the_linear_part():
    # stiff decay: h a = -10 and -2.5 at h = 0.05, outside DP54's real stability interval (about -3.3)
    # for the first; IF-RK is exact on e^{aT}. (e^{aT} must stay representable, or the check is empty.)
    a = np.array([-200.0, -50.0])
    rk = IFRungeKutta(lambda t, u, last: np.zeros_like(u), DP54, lin=a)
    u = np.ones(2)
    for i in range(20):
        u, _, err = rk.step(0.05 * i, u, 0.05)
    assert np.all(u > 0) and np.allclose(u, np.exp(a * 1.0), atol=0, rtol=1e-12)
    assert np.all(np.abs(err) <= 1e-15 * np.abs(u))
    # and a plain explicit DP54 step (no integrating factor) at h a = -10 does blow up: the test is not empty
    explicit = IFRungeKutta(lambda t, u, last: a * u, DP54, lin=np.zeros(2))
    v = np.ones(2)
    for i in range(20):
        v, _, _ = explicit.step(0.05 * i, v, 0.05)
    assert abs(v[0]) > 1.0


def test_embedded_estimate_has_the_error_order():
    a = np.array([-0.7])
    rk = IFRungeKutta(lambda t, u, last: np.sin(t) * np.ones_like(u), DP54, lin=a)
    ests = []
    for h in (0.2, 0.1):
        _, _, err = rk.step(0.3, exact(a, 1.0, 0.3), h)
        ests.append(abs(err[0]))
    assert abs(math.log2(ests[0] / ests[1]) - 5) < 0.5   # local error of the order-4 estimate ~ h^5


def test_controller_accepts_small_and_rejects_large_errors():
    c = StepController(4)
    ok, h = c.propose(0.1, 1e-3)
    assert ok and h > 0.1
    ok, h = c.propose(0.1, 4.0)
    assert not ok and h < 0.1
    ok, h = c.propose(0.1, float("nan"))
    assert not ok and h == pytest.approx(0.02)


def _nonlinear_problem(n=64, seed=5):
    """u' = L u + N(u) on complex coefficients: L = -nu k^2 (stiff at the top), N a smooth quadratic
    coupling of neighbouring modes (a stand-in for a pseudo-spectral flux)."""
    rng = np.random.default_rng(seed)
    k = np.arange(n)
    lin = -0.5 * k * k
    u0 = (rng.standard_normal(n) + 1j * rng.standard_normal(n)) / (1.0 + k) ** 2

    def rhs(t, u, last):
        return 0.3j * k * np.roll(u, 1) * np.conj(u[1]) - 0.2 * np.cos(t) * u
    return rhs, lin, u0


@pytest.mark.parametrize("h", [1e-3, 0.05, 0.3])
def test_interaction_picture_equals_the_lawson_form(h):
    # the stepper forms its stages as e^{c_i h L}(u + h sum a_ij e^{-c_j h L} k_j); the Lawson form
    # sums e^{(c_i - c_j) h L} k_j term by term. Mathematically the same step: they agree to round-off.
    rhs, lin, u0 = _nonlinear_problem()
    rk = IFRungeKutta(rhs, DP54, lin=lin)
    assert h * 0.5 * 63 ** 2 <= rk.MAX_EXPONENT       # this step takes the interaction picture
    fast = rk.step(0.2, u0, h)
    lawson = rk._lawson_step(0.2, u0, h, None)
    scale = np.abs(u0).max()          # the error estimate is a difference of O(|u|) terms: compare on that scale
    for a, b in zip(fast, lawson):
        assert np.abs(a - b).max() <= 1e-14 * max(np.abs(b).max(), scale)


@pytest.mark.parametrize("tab", [DP54, BS32])
@pytest.mark.parametrize("h", [1e-3, 0.05, 0.3, 0.4])
@pytest.mark.parametrize("with_lin", [True, False])
def test_a_factored_right_hand_side_is_the_same_step(tab, h, with_lin):
    # N = D n with D fixed (a spectral derivative): the stepper applies D (and e^{-c h L}) where it stores a
    # stage instead of the right-hand side forming N. The same step to round-off (h = 0.4 takes the Lawson
    # form, which uses N itself); n returns one reused buffer, which the stepper must read before its next call
    base, lin, u0 = _nonlinear_problem()
    k = np.arange(u0.size)
    D = -1j * k / 7.0
    buf = np.empty_like(u0)

    def n(t, u, last):
        buf[...] = base(t, u, last)
        return buf

    def rhs(t, u, last):
        return np.multiply(n(t, u, last), D)
    lin = lin if with_lin else None
    plain = IFRungeKutta(rhs, tab, lin=lin)
    factored = IFRungeKutta(rhs, tab, lin=lin, scaled=(n, D))
    f0 = rhs(0.2, u0, True)
    scale = np.abs(u0).max()
    for first in (f0, None):         # the first stage given (FSAL) or evaluated by the step
        a = plain.step(0.2, u0, h, None if first is None else first.copy())
        b = factored.step(0.2, u0, h, None if first is None else first.copy())
        for x, y in zip(a, b):
            assert np.abs(x - y).max() <= 1e-14 * max(np.abs(x).max(), scale)
        # the FSAL stage handed to the next step is N at u_new, formed as the right-hand side forms it
        assert np.array_equal(b[1], rhs(0.2 + h, b[0], True))



@pytest.mark.parametrize("tab", [DP54, BS32, RK4])
@pytest.mark.parametrize("h", [1e-3, 0.05, 0.4])
def test_stages_in_factored_form_are_the_same_bits(tab, h):
    # with scaled = (n, D, True) the stepper hands n a stage as its weighted sum and its factor e^{c h L}
    # (flat float arrays) and n forms the product; every stage but an FSAL method's last. The products are
    # the ones the stepper would form itself: the same step bit for bit, with the stages checked to arrive
    # in both forms (h = 0.4 takes the Lawson form, which forms its stages itself)
    base, lin, u0 = _nonlinear_problem()
    k = np.arange(u0.size)
    D = -1j * k / 7.0
    buf = np.empty_like(u0)
    forms = []

    def n(t, u, last, factor=None):
        if factor is not None:
            assert not last and u.dtype == factor.dtype == float and u.shape == factor.shape == (2 * u0.size,)
            u = np.multiply(u, factor).view(complex)
        forms.append(factor is not None)
        buf[...] = base(t, u, last)
        return buf

    def rhs(t, u, last):
        return np.multiply(n(t, u, last), D)
    two = IFRungeKutta(rhs, tab, lin=lin, scaled=(n, D))
    three = IFRungeKutta(rhs, tab, lin=lin, scaled=(n, D, True))
    f0 = rhs(0.2, u0, True)
    a = two.step(0.2, u0, h, f0.copy())
    forms.clear()
    b = three.step(0.2, u0, h, f0.copy())
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    lawson = h * 0.5 * 63 ** 2 > three.MAX_EXPONENT
    factored = [True] * (tab.stages - 1 - tab.fsal) + [False] * tab.fsal
    assert forms == ([False] * (tab.stages - 1) if lawson else factored)


def test_stiff_steps_take_the_lawson_form_and_stay_finite():
    # h max|L| = 0.5 63^2 * 0.4 ~ 800 > MAX_EXPONENT: e^{-c h L} would overflow, so the step falls back to
    # the Lawson form, whose factors only decay; the top modes are damped to (nearly) nothing
    rhs, lin, u0 = _nonlinear_problem()
    rk = IFRungeKutta(rhs, DP54, lin=lin)
    h = 0.4
    assert h * 0.5 * 63 ** 2 > rk.MAX_EXPONENT
    u, f, err = rk.step(0.0, u0, h)
    assert np.all(np.isfinite(u)) and np.all(np.isfinite(err))
    ref = rk._lawson_step(0.0, u0, h, None)
    assert np.array_equal(u, ref[0]) and np.array_equal(err, ref[2])
    assert abs(u[-1]) < 1e-100


def test_round_step_is_exact_and_keeps_seven_bits():
    from solvers.stepping import STEP_BITS, round_step
    rng = np.random.default_rng(2)
    for h in np.concatenate([10.0 ** rng.uniform(-9, 2, 200), [0.5, 1.0, 0.75, 2.0 ** -30]]):
        r = round_step(float(h))
        m, e = math.frexp(r)
        assert r <= h and r >= h * (1 - 2.0 ** (1 - STEP_BITS))
        assert (m * 2 ** STEP_BITS).is_integer()
        assert round_step(r) == r
    assert round_step(math.inf) == math.inf


@pytest.fixture
def bar_output(monkeypatch):
    """What the progress bar of ``Progress(True, ...)`` writes (tqdm redirected into a string, every
    refresh drawn)."""
    import io

    import tqdm
    import tqdm.auto
    buf = io.StringIO()

    class Bar(tqdm.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, file=buf, mininterval=0.0, **k)
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    return buf


def test_progress_bar_is_redrawn_when_a_phase_starts_earlier(bar_output):
    """The bar of a PDE run goes back to the handoff for the error-estimate rerun: it is still redrawn as
    that phase advances (tqdm's own rule waited until t passed t_final's mark again: a frozen bar)."""
    import time

    from solvers.stepping import Progress
    buf = bar_output
    p = Progress(True, 10.0)
    draws = []
    for t in (2.0, 10.0, 0.5, 1.0, 2.0):
        time.sleep(0.11)
        p(t, {"check": "2x nodes"} if draws and t < 10.0 else {})
        draws.append(buf.getvalue().count("\r"))
    # every call of the new phase draws (its first draws twice: the reset of the phase's bar, then its time)
    assert all(b > a for a, b in zip(draws[1:], draws[2:])), draws
    assert "t=2/10" in buf.getvalue().rsplit("\r", 1)[-1] and "check=2x nodes" in buf.getvalue().rsplit("\r", 1)[-1]
    p.close()


def test_progress_bar_of_a_phase_that_ends_before_t_final_counts_to_its_own_end(bar_output):
    """The error-estimate rerun ends at ``t_end`` (where the run stopped), before t_final: its bar counts to
    t_end from its own start, not to t_final with the whole run's clock (which showed t=3.7/1000 and half
    an hour remaining for a phase of a second)."""
    import time

    from solvers.stepping import Progress
    buf = bar_output
    for t_final, t0 in ((1000.0, 0.0), (42.7, 0.0), (1000.0, 20.0)):     # also t_end = t_final; a resumed run
        p = Progress(True, t_final, t0)
        p(42.7, {})
        time.sleep(0.11)
        phase_start = p.bar._time()          # the bar's clock as the phase begins (the run's began earlier)
        p(3.5, {"check": "2x nodes", "t_end": 42.7})
        time.sleep(0.11)
        p(10.0, {"check": "2x nodes", "t_end": 42.7})
        last = buf.getvalue().rsplit("\r", 1)[-1]
        assert "t=10/42.7" in last and "check=2x nodes" in last, last
        # the phase's own clock and rate: counted from the phase's first call, whatever the machine's load
        assert p.bar.format_dict["initial"] == 3.5 and p.bar.start_t >= phase_start, (p.bar.start_t, phase_start)
        p.close()


def test_a_progress_callable_with_an_interval_still_sees_each_phase_start_and_end():
    """A callable that asks for at most one call a day (``interval``) gets the first step, the first step
    after the time went back (the error-estimate rerun starting at its handoff), the step that ends each
    phase (t_final; the rerun's own t_end), and nothing else; without ``interval``, every step."""
    from solvers.stepping import Progress

    class Every:
        def __init__(self, interval=None):
            self.seen = []
            if interval is not None:
                self.interval = interval

        def __call__(self, info):
            self.seen.append((info["t"], info.get("check")))

    steps = [(t, {}) for t in np.linspace(0.5, 10.0, 20)]
    steps += [(t, {"check": "2x nodes", "t_end": 4.0}) for t in np.linspace(0.1, 4.0, 14)]
    slow, fast = Every(86400.0), Every()
    for cb in (slow, fast):
        p = Progress(cb, 10.0)
        for t, info in steps:
            p(float(t), info)
    assert slow.seen == [(0.5, None), (10.0, None), (0.1, "2x nodes"), (4.0, "2x nodes")], slow.seen
    assert len(fast.seen) == len(steps)


def test_the_loop_asks_a_rate_limited_progress_first_and_builds_only_the_dicts_it_delivers(monkeypatch):
    """The stepping loop asks ``Progress.wants`` before building a step's dict: a callable with an
    interval then receives exactly the calls it would have received from a call after every step (here
    a phase that goes back in time, and steps one second apart against an interval of 2.5 s), and a PDE
    run builds its progress dict only for those (the first step, the last at t_final, none between)."""
    from solvers import pde
    from solvers.eulerian import EulerianPhase
    from solvers.stepping import Progress

    class Every:
        def __init__(self, interval):
            self.interval, self.seen = interval, []

        def __call__(self, info):
            self.seen.append(info["t"])

    now = [0.0]                                        # the clock: one second per step
    monkeypatch.setattr("solvers.stepping.time.monotonic", lambda: now[0])
    times = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 1.5, 2.5, 6.0, 10.0]
    eager, gated = Every(2.5), Every(2.5)
    p, q = Progress(eager, 10.0), Progress(gated, 10.0)
    for t in times:
        now[0] += 1.0
        p(t, {})
        if q.wants(t):
            q(t, {})
    assert gated.seen == eager.seen and 1.5 in eager.seen and len(eager.seen) < len(times), eager.seen
    monkeypatch.undo()

    built, report = [], EulerianPhase.report
    monkeypatch.setattr(EulerianPhase, "report", lambda self, h: (built.append(self.t), report(self, h))[1])
    day = Every(86400.0)
    model = Model(2, 4.0, "descent", noise=0.02, perceptron=Perceptron.random(2, 2, "tanh", 1.0, seed=3))
    r = pde.solve_pde(model, 2.0, 128, max_degree=128, progress=day)
    assert r.stop_reason == "t_final" and r.nsteps > 10, r.nsteps
    assert day.seen == built == [built[0], 2.0], day.seen


def test_progress_bar_ends_where_the_run_ended(bar_output):
    """Steps closer together than the bar's 0.1 s redraw are not drawn one by one (formatting after every
    step cost ~9% of a small run), but the bar's last picture is the last step, drawn when it closes."""
    from solvers.stepping import Progress
    buf = bar_output
    p = Progress(True, 10.0)
    for t in np.linspace(0.01, 7.5, 500):
        p(float(t), {"dt": 0.015, "nsteps": 1})
    drawn = buf.getvalue().count("\r")
    p.close()
    assert drawn < 50, drawn
    assert "t=7.5/10" in buf.getvalue().rsplit("\r", 1)[-1], buf.getvalue().rsplit("\r", 1)[-1]


class _Forced(Integration):
    """u' = a u + sin t (``exact``) with DP54 and the DOPRI5 controller, landing on t = k * every."""

    def __init__(self, a, every, t_final, rtol=1e-8):
        super().__init__(t=0.0, t_final=t_final, dt=1e-3, tableau=DP54, controller=StepController(error_order=4),
                         max_steps=10 ** 6, steps={"t": [], "dt": [], "error": [], "accepted": []},
                         lin=np.asarray(a, dtype=float))
        self.state = np.ones(len(a))
        self.every, self.rtol, self.saved = every, rtol, []

    def rhs(self, t, u, last=False):
        return np.sin(t) * np.ones_like(u)

    def error_norm(self, err, u, u_new):
        scale = self.rtol * (1.0 + np.maximum(np.abs(u), np.abs(u_new)))
        return float(np.sqrt(np.mean((err / scale) ** 2)))

    def save_time(self):
        return min(self.t_final, (math.floor(self.t / self.every + 1e-9) + 1) * self.every)

    def accept(self, u_new, f_new, h, lands):
        self.state, self.f = u_new, f_new
        if lands:
            self.saved.append((self.t, u_new.copy()))


def test_a_step_shortened_to_land_on_a_snapshot_leaves_the_step_control_as_it_was():
    """The step cut short to land on a snapshot time is checked (accepted or rejected) like any other, but
    its small error does not set the next step: the run goes on with the step it had before (the
    integrating factors of that step are still held), instead of regrowing from the short one through a
    new step size (new exponentials) per step."""
    a = -np.array([0.5, 3.0, 40.0])
    free = _Forced(a, math.inf, 12.0)
    assert free.integrate()[0] == "t_final"
    snap = _Forced(a, 0.37, 12.0)
    assert snap.integrate()[0] == "t_final"
    for t, u in snap.saved:                     # the snapshots are at the exact times, and accurate
        assert abs(t / 0.37 - round(t / 0.37)) < 1e-12 or t == 12.0
        assert np.max(np.abs(u - exact(a, 1.0, t))) < 1e-6
    dt, ok = np.asarray(snap.steps["dt"]), np.asarray(snap.steps["accepted"])
    ts = np.asarray(snap.steps["t"]) + dt
    landed = np.flatnonzero([abs(x / 0.37 - round(x / 0.37)) < 1e-9 for x in ts[:-1]])
    cut = [i for i in landed if 0 < i and ok[i - 1] and ok[i] and dt[i] < 0.98 * dt[i - 1]]
    assert len(cut) >= 20
    # after a cut landing the step is the one proposed before it: the same as the step before the landing
    # unless the controller was changing it (here 20 of 32 the same, median change 0); regrown from the
    # short step it came back 10% shorter (median; 1 of 32 the same)
    r = np.array([dt[i + 1] / dt[i - 1] - 1 for i in cut])
    assert np.median(np.abs(r)) <= 0.01 and np.mean(r == 0) >= 0.5
    # at most one step more per snapshot than the run without snapshots, and two step sizes per
    # snapshot (the cut one and the return) beyond the free run's
    assert snap.nsteps <= free.nsteps + len(snap.saved)
    changes = lambda d: int(np.count_nonzero(d[1:] != d[:-1]))
    assert changes(dt) <= changes(np.asarray(free.steps["dt"])) + 2 * len(snap.saved)


# --- Rosenbrock-W methods (the node continuation's stiff steps) --------------------------------------------
def _rosenbrock_errors(tab, jac, steps):
    """Global errors at t = 1 of y' = f(y) (van der Pol, mu = 1, from (2, 0)) with ``jac`` the W of the steps."""
    from scipy.integrate import solve_ivp
    from solvers.stepping import Rosenbrock
    f = lambda t, y, last=False: np.array([y[1], (1 - y[0] ** 2) * y[1] - y[0]])      # noqa: E731
    ref = solve_ivp(f, (0, 1), [2.0, 0.0], rtol=1e-13, atol=1e-14, method="DOP853").y[:, -1]
    errs = []
    for n in steps:
        st = Rosenbrock(f, tab, lambda u, g: (lambda b, M=np.eye(2) - g * jac(u): np.linalg.solve(M, b)))
        y = np.array([2.0, 0.0])
        for i in range(n):
            y = st.step(i / n, y, 1.0 / n)[0]
        errs.append(np.abs(y - ref).max())
    return np.array(errs)


@pytest.mark.parametrize("name", ["ROS2", "ROS34PW2"])
def test_rosenbrock_w_methods_have_their_order_for_any_w(name):
    """A W-method keeps its order whatever W approximates the Jacobian: with the exact Jacobian and with W = 0
    (then ROS2 is Heun's method and ROS34PW2 an explicit Runge–Kutta method of order 3), halving the step
    divides the error by 2^order."""
    from solvers import stepping
    tab = getattr(stepping, name)
    exact = lambda y: np.array([[0.0, 1.0], [-2 * y[0] * y[1] - 1, 1 - y[0] ** 2]])      # noqa: E731
    for jac in (exact, lambda y: np.zeros((2, 2))):
        e = _rosenbrock_errors(tab, jac, (40, 80, 160))
        rates = np.log2(e[:-1] / e[1:])
        assert np.all(np.abs(rates - tab.order) < 0.15), rates


@pytest.mark.parametrize("name", ["ROS2", "ROS34PW2"])
def test_rosenbrock_w_methods_step_over_stiffness(name):
    """y1' = -lambda (y1 - y2^2), y2' = -y2, lambda = 10^6: the solution follows the slow manifold y1 = y2^2,
    y2 = e^{-t}. L-stable methods with the exact Jacobian take steps of 10^5 / lambda and more, and converge
    at their order in the slow variable (the embedded estimate stays of the order of the error)."""
    from solvers import stepping
    from solvers.stepping import Rosenbrock
    tab, lam = getattr(stepping, name), 1e6
    f = lambda t, y, last=False: np.array([-lam * (y[0] - y[1] ** 2), -y[1]])      # noqa: E731
    J = lambda y: np.array([[-lam, 2 * lam * y[1]], [0.0, -1.0]])                     # noqa: E731
    errs = []
    for n in (10, 20, 40):
        st = Rosenbrock(f, tab, lambda u, g: (lambda b, M=np.eye(2) - g * J(u): np.linalg.solve(M, b)))
        y = np.array([1.0, 1.0])
        for i in range(n):
            y, _, err = st.step(2 * i / n, y, 2.0 / n)
        errs.append(abs(y[1] - math.exp(-2.0)) + abs(y[0] - math.exp(-4.0)))
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(rates > tab.order - 0.5), (errs, rates)
