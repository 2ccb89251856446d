"""Time stepping: explicit Runge–Kutta with an optional diagonal integrating factor.

For u' = L u + N(t, u) with L diagonal (real, <= 0: the noise term nu Laplacian in spectral space),
the integrating-factor (Lawson) Runge–Kutta method treats L exactly:

    U_i   = e^{c_i h L} u + h sum_{j<i} a_ij e^{(c_i - c_j) h L} N(t + c_j h, U_j)
    u_new = e^{h L} u + h sum_j b_j e^{(1 - c_j) h L} N_j
    err   = h sum_j (b_j - bhat_j) e^{(1 - c_j) h L} N_j      (embedded estimate)

With nodes c increasing every factor is a decaying exponential, so the scheme is stable for any
stiffness of L and exact for the linear part (The model §4: noise never explicit). With L = None it is
the plain Runge–Kutta method. Step sizes follow Hairer's DOPRI5 controller (PI with Lund
stabilisation) and an optional external bound (CFL), supplied by the caller; with an integrating
factor they are rounded down to ``STEP_BITS`` bits of mantissa (:func:`round_step`), so that the
factors, which cost exponentials for every new step size, are reused from step to step.
:class:`IFRungeKutta` forms the stages in the interaction picture (see its notes): the same step,
with one weighted sum per stage.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ._compiled import kernels
from .progress import Progress, always
# the methods are data of their own module; they are also imported from here
from .tableaus import BS32, DP54, EULER, RK4, RODASP, ROS2, ROS34PW2, TABLEAUS, RosenbrockTableau, Tableau

__all__ = ["Tableau", "TABLEAUS", "IFRungeKutta", "RosenbrockTableau", "ROS2", "ROS34PW2", "RODASP", "Rosenbrock",
           "StepController", "Integration", "Progress", "round_step", "DP54", "BS32", "RK4", "EULER"]


class Rosenbrock:
    """One step of a :class:`RosenbrockTableau` method.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u, last)``, as for :class:`IFRungeKutta`.
    tableau : RosenbrockTableau
    factor : callable
        ``factor(u, g)`` returns ``solve(b)``, the solution x of (I - g W(u)) x = b for the state u: the
        caller's Jacobian approximation W, factored once per step.
    """

    def __init__(self, rhs: RHS, tableau: RosenbrockTableau, factor: Callable) -> None:
        self.rhs, self.tableau, self.factor = rhs, tableau, factor

    def step(self, t: float, u: np.ndarray, h: float, f0: np.ndarray | None = None
             ) -> tuple[np.ndarray, None, np.ndarray]:
        """Advance u from t to t + h; returns (u_new, None, err) (no stage is the new state's F)."""
        tab = self.tableau
        solve = self.factor(u, tab.gamma * h)
        k: list[np.ndarray] = []
        for i in range(tab.stages):
            if i == 0:
                rhs = self.rhs(t, u, False) if f0 is None else f0
            else:
                U = u.copy()
                for j in range(i):
                    if tab.a[i, j] != 0.0:
                        U += (h * tab.a[i, j]) * k[j]
                rhs = self.rhs(t + h * float(tab.a[i].sum()), U, False)
                for j in range(i):
                    if tab.c[i, j] != 0.0:
                        rhs = rhs + tab.c[i, j] * k[j]
            k.append(solve(rhs))
        u_new = u.copy()
        err = np.zeros_like(u)
        for ki, m, e in zip(k, tab.m, tab.e):
            u_new += (h * m) * ki
            err += (h * e) * ki
        return u_new, None, err

RHS = Callable[..., np.ndarray]


class IFRungeKutta:
    """One step of an (integrating-factor) explicit Runge–Kutta method.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u, last)`` returns N(t, u) as a new array; ``last`` is True for the stage evaluated
        at the end point of the step (so the caller can record diagnostics of the new state for free).
    tableau : Tableau
    lin : ndarray or None
        Diagonal of L, broadcastable against u; None for no linear part.
    scaled : (n, D), (n, D, True) or None
        The right-hand side factored as N(t, u) = D * n(t, u, last), with D a fixed array of u's shape
        (a spectral derivative: the divergence of a flux; complex only for a complex state) and ``n``
        returning an array that the stepper reads before its next call (a transform's output buffer;
        C-contiguous, of u's shape, when the state is complex: the compiled product stores it).
        The stepper then applies D, with the factor e^{-c h L}, in the one multiplication that stores a
        stage, instead of the right-hand side forming N in a pass of its own; N itself is formed only for
        the last stage of an FSAL method (as ``np.multiply(n, D)``: a right-hand side that returns N must
        form it the same way, so that a restarted run repeats the uninterrupted one bit for bit). ``rhs``
        is still called where N itself is needed: the first stage without ``f0`` and the Lawson form.
        With a third entry True, ``n`` also takes a stage in factored form, ``n(t, v, False, factor)``:
        the state whose flat float layout is ``v * factor`` (flat float arrays; ``v`` is a scratch row
        the stepper writes again before the next call). In a step in the
        interaction picture with an integrating factor the stepper then hands the stages i = 1 .. s - 1
        (all but an FSAL method's last, which is u_new and formed here; stage 0 is ``f0`` or ``rhs``'s)
        as the weighted sum and e^{c_i h L}, and ``n`` forms their product where it copies its input
        anyway (a transform's input buffer): one pass fewer per stage, the same products, so the same
        bits. Lawson steps form their stages themselves. Like the rest of the interaction picture, this
        needs c_i != 0 for i >= 1 (every tableau here).

    Notes
    -----
    The stages are formed in the interaction picture: with g_j = e^{-c_j h L} k_j (k_j = N_j),

        U_i = e^{c_i h L} (u + h sum_j a_ij g_j),   err = e^{h L} h sum_j e_j g_j,

    which is the Lawson form of the module docstring term by term (e^{(c_i - c_j) h L} =
    e^{c_i h L} e^{-c_j h L}), with the same round-off bound: the growing factors e^{-c_j h L} scale
    every term of a mode alike. Each stage is then one weighted sum over the stacked g_j (one call of
    the compiled ``weighted_sum``, rows added in order: :meth:`_weighted`) instead of a pass per term,
    and a new step size costs one exponential (and one reciprocal) per node c instead of one
    exponential per distinct difference c_i - c_j. The growing factors must stay far from overflow:
    when h max|L| > ``MAX_EXPONENT`` the step uses the Lawson form directly (one factor per difference).
    """

    #: largest h max|L| for the interaction picture: e^{600} ~ 4e260 leaves 1e47 of headroom for the
    #: stage values, and e^{-600} ~ 3e-261 is still a normal number
    MAX_EXPONENT = 600.0

    def __init__(self, rhs: RHS, tableau: Tableau, lin: np.ndarray | None = None,
                 scaled: tuple | None = None) -> None:
        self.rhs = rhs
        self._n, self._D = (None, None) if scaled is None else (scaled[0], np.asarray(scaled[1]))
        self._factored = scaled is not None and len(scaled) > 2 and bool(scaled[2])
        self.tableau = tableau
        self.lin = None if lin is None or not np.any(lin) else np.asarray(lin, dtype=float)
        tab = tableau
        s = tab.stages
        # the tableau as arrays: row i of A holds the weights of stage i (zeros above the diagonal)
        self._A = np.zeros((s, s))
        for i, row in enumerate(tab.A):
            self._A[i, :len(row)] = row
        self._b = np.array(tab.b)
        self._e = None if tab.e is None else np.array(tab.e)
        # the distinct nonzero nodes: factor row r of the stacked exponentials is e^{nodes[r] h L}
        self._nodes = sorted({c for c in tab.c if c != 0.0} | {1.0})
        self._row = {c: r for r, c in enumerate(self._nodes)}
        self._lmax = 0.0 if self.lin is None else float(np.max(-self.lin))
        # the Lawson form (fallback): (j, weight, tau) with the factor e^{tau h L} applied to k_j
        self._stages = [[(j, a, tab.c[i] - tab.c[j]) for j, a in enumerate(tab.A[i]) if a != 0.0]
                        for i in range(s)]
        self._final = [(j, b, 1.0 - tab.c[j]) for j, b in enumerate(tab.b) if b != 0.0]
        self._error = [(j, e, 1.0 - tab.c[j]) for j, e in enumerate(tab.e) if e != 0.0] if tab.e else []
        taus = {t for plan in self._stages + [self._final, self._error] for (_, _, t) in plan}
        taus |= set(tab.c) | {1.0}
        self._taus = sorted(t for t in taus if t != 0.0)
        self._h: float | None = None
        self._F: dict[float, np.ndarray] = {}
        self._W = np.empty((s + 2, s + 1))
        self._W_h: float | None = None
        self._g: np.ndarray | None = None
        self._shape: tuple | None = None
        self._udtype: np.dtype | None = None

    # --- the Lawson form (stiff steps) ------------------------------------------------------------
    def _factors(self, h: float) -> dict:
        """e^{tau h L} for every tau the tableau needs (computed once per step size)."""
        if h != self._h:
            hl = h * self.lin
            self._F = {t: np.exp(t * hl) for t in self._taus}
            self._h = h
        return self._F

    def _combine(self, u, base: float, plan, k, h, F) -> np.ndarray:
        # e^{base h L} u + h sum_j w_j e^{tau_j h L} k_j
        out = u * F[base] if base != 0.0 else u.copy()
        for j, w, tau in plan:
            out += (h * w) * (k[j] * F[tau]) if tau != 0.0 else (h * w) * k[j]
        return out

    def _lawson_step(self, t: float, u: np.ndarray, h: float, f0: np.ndarray | None):
        tab = self.tableau
        s = tab.stages
        F = self._factors(h)
        k: list = [None] * s
        k[0] = self.rhs(t, u, s == 1 and tab.fsal) if f0 is None else f0
        u_new = None
        for i in range(1, s):
            U = self._combine(u, tab.c[i], self._stages[i], k, h, F)
            last = tab.fsal and i == s - 1
            if last:
                u_new = U
            k[i] = self.rhs(t + tab.c[i] * h, U, last)
        if u_new is None:
            u_new = self._combine(u, 1.0, self._final, k, h, F)
        err = None
        if self._error:
            err = np.zeros_like(u_new)
            for j, e, tau in self._error:
                err += (h * e) * (k[j] * F[tau] if tau != 0.0 else k[j])
        return u_new, (k[-1] if tab.fsal else None), err

    # --- the interaction picture (all other steps) ------------------------------------------------
    def _buffers(self, u: np.ndarray) -> None:
        """The stack [u, g_1 .. g_s] (u's shape and dtype), its rows as flat float arrays, and the
        exponentials e^{+-c h L} (one row per node), allocated once for the state's shape."""
        s = self.tableau.stages
        g = np.empty((s + 1,) + u.shape, dtype=np.result_type(u, float))
        flat = g.reshape(s + 1, -1)
        self._g = g
        self._flat = flat.view(float) if g.dtype == complex else flat
        self._shape, self._dtype, self._udtype = u.shape, g.dtype, u.dtype
        self._flat_state = u.ndim == 1          # a state is its flat row: no reshape
        self._rows = [g[j, ...] for j in range(s + 1)]      # g[j] as views (0-d states too), made once
        self._nflat = self._flat.shape[1]
        self._scratch = np.empty(self._nflat)       # a factored stage's weighted sum (read at once by n)
        # (weights, stack rows) of each weighted sum (_weighted): views of the fixed arrays W and flat
        W, f = self._W, self._flat
        self._sums = [None] + [(W[i, : i + 1], f[: i + 1]) for i in range(1, s)] + \
            [(W[s], f[: s + 1]), (W[s + 1, 1:], f[1: s + 2])]
        D = None
        if self._n is not None:
            if np.iscomplexobj(self._D) and g.dtype != complex:
                raise ValueError("a complex factor D of the right-hand side needs a complex state")
            D = np.broadcast_to(self._D, u.shape).astype(g.dtype)
            self._Dstage = D
        # complex stages are stored by the compiled product (ar br - ai bi, ar bi + ai br, each operation
        # rounded on its own on every CPU; numpy's complex product fuses them on CPUs with FMA); n must
        # then return a C-contiguous array of u's shape
        self._cstore = D is not None and g.dtype == complex
        if self.lin is not None:
            # c L per node on the flat float layout of a state (each L_k twice for complex states: the
            # factors then multiply float views, not complex arrays by real ones, which numpy casts)
            lin = np.broadcast_to(self.lin, u.shape).reshape(-1)
            if g.dtype == complex:
                lin = np.repeat(lin, 2)
            self._nl = np.multiply.outer(np.asarray(self._nodes), lin)
            self._slots = [_Exponentials(self._nl, self._row, self.tableau.c, D) for _ in range(2)]

    def _exponentials(self, h: float) -> "_Exponentials":
        """The factors for step size h: two step sizes are kept (the run's step and a step shortened
        to land on a snapshot time, after which the run's step comes back)."""
        first, second = self._slots
        if first.h != h:
            if second.h != h:
                second.compute(self._nl, h)
            self._slots = [second, first]
        return self._slots[0]

    def _weights(self, h: float) -> np.ndarray:
        """The weights of the stack [u, g_1 .. g_s] at step size h: row i of (1 | h A) forms stage i,
        row s holds (1 | h b), row s + 1 (0 | h e) (kept for the last step size)."""
        if self._W_h != h:
            s = self.tableau.stages
            W = self._W
            W[:, 0] = 1.0
            W[s + 1, 0] = 0.0
            np.multiply(self._A, h, out=W[:s, 1:])
            np.multiply(self._b, h, out=W[s, 1:])
            if self._e is not None:
                np.multiply(self._e, h, out=W[s + 1, 1:])
            self._W_h = h
        return self._W

    def _weighted(self, i: int, factor: np.ndarray | None = None) -> np.ndarray:
        """Row i of the weights (:meth:`_weights`) applied to the stack [u, g_1, ...]: stage i (i < s), the
        new state (i = s), the error estimate (i = s + 1), times ``factor`` (e^{c h L} on the flat float
        layout) when given, as a flat float row (a new array; :meth:`_state` views it as a state). The
        pairs (weights, rows of the stack) are views made once (``_sums``).

        The compiled ``weighted_sum`` (``solvers._compiled``): the rows are added in order, each entry on
        its own, so the round-off is the same on every CPU (a BLAS product's order of summation is its
        kernel's, which differs between CPUs), and the product with the factor is in the same pass."""
        w, rows = self._sums[i]
        out = np.empty(self._nflat)
        kernels.weighted_sum(w, rows, out, factor)
        return out

    def _state(self, flat: np.ndarray) -> np.ndarray:
        """A flat float row as a state (u's dtype and shape; a view)."""
        x = flat.view(self._dtype)
        return x if self._flat_state else x.reshape(self._shape)

    def step(self, t: float, u: np.ndarray, h: float, f0: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Advance u from t to t + h.

        Returns
        -------
        u_new, f_new, err
            The new state; N at the new state when the method is FSAL (else None); the embedded
            error estimate (None for methods without one).
        """
        lin = self.lin
        if lin is not None and h * self._lmax > self.MAX_EXPONENT:
            return self._lawson_step(t, u, h, f0)
        tab = self.tableau
        s = tab.stages
        g = self._g
        if g is None or u.shape != self._shape or u.dtype != self._udtype:
            self._buffers(u)
            g = self._g
        ex = self._exponentials(h) if lin is not None else None
        self._weights(h)                  # in place in W, which the pairs of _sums view
        rows = self._rows
        rows[0][...] = u
        k = self.rhs(t, u, s == 1 and tab.fsal) if f0 is None else f0
        rows[1][...] = k
        u_new = None
        c = tab.c
        nfun = self._n
        state = self._state
        factored = self._factored and lin is not None
        sums = self._sums
        wsum = kernels.weighted_sum
        store = kernels.complex_multiply if self._cstore else _multiply
        scratch = self._scratch
        for i in range(1, s):
            weights, stack = sums[i]
            last = tab.fsal and i == s - 1
            if factored and not last:
                # the weighted sum into a scratch row: n multiplies it by e^{c_i h L} where it copies it
                wsum(weights, stack, scratch, None)
                store(nfun(t + c[i] * h, scratch, False, ex.decay_of[i]), ex.scaled_of[i], rows[i + 1])
                continue
            flat = np.empty(self._nflat)            # self._weighted(i), without its frame
            wsum(weights, stack, flat, ex.decay_of[i] if lin is not None else None)
            U = state(flat)
            if last:
                u_new = U          # the last FSAL stage is evaluated exactly at u_new
            if nfun is not None:
                n = nfun(t + c[i] * h, U, last)
                # the stage stored as (D e^{-c h L}) n: one pass (c = 0 or no L: D n)
                store(n, ex.scaled_of[i] if lin is not None and c[i] != 0.0 else self._Dstage, rows[i + 1])
                if last:
                    # numpy's product, as a right-hand side that returns N forms it (see ``scaled``): the
                    # same bits as a restart's first stage on this machine (the spaces' D is real or
                    # purely imaginary: fused or not, each part of the product is rounded once, alike)
                    k = np.multiply(n, self._D)
                continue
            k = self.rhs(t + c[i] * h, U, last)
            if lin is not None and c[i] != 0.0:
                np.multiply((k if self._flat_state else k.reshape(-1)).view(float), ex.grow_of[i],
                            out=self._flat[i + 1])
            else:
                rows[i + 1][...] = k
        decay_end = ex.decay_end if lin is not None else None
        if u_new is None:
            u_new = self._state(self._weighted(s, decay_end))
        err = None
        if self._e is not None:
            err = self._state(self._weighted(s + 1, decay_end))
        return u_new, (k if tab.fsal else None), err


def _multiply(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(a, b, out=out)


class _Exponentials:
    """e^{c h L} ("decay") and e^{-c h L} ("grow") for the nonzero nodes c of a tableau at one step size
    h, on the flat float layout of a state, with their rows by stage."""

    def __init__(self, nl: np.ndarray, row: dict, c: tuple, D: np.ndarray | None = None) -> None:
        self.h: float | None = None
        self.decay = np.empty_like(nl)
        self.grow = np.empty_like(nl)
        self.decay_of = [self.decay[row[ci]] if ci != 0.0 else None for ci in c]
        self.grow_of = [self.grow[row[ci]] if ci != 0.0 else None for ci in c]
        self.decay_end = self.decay[row[1.0]]
        # with a factored right-hand side N = D n (IFRungeKutta's ``scaled``): D e^{-c h L} in the state's
        # shape and dtype (e^{-c h L} is real: one value per complex entry, the float layout's even ones)
        self.D = D
        if D is not None:
            self.scaled = np.empty((nl.shape[0],) + D.shape, dtype=D.dtype)
            self.scaled_of = [self.scaled[row[ci]] if ci != 0.0 else None for ci in c]

    def compute(self, nl: np.ndarray, h: float) -> None:
        np.exp(np.multiply(nl, h, out=self.decay), out=self.decay)
        np.divide(1.0, self.decay, out=self.grow)       # normal numbers: h max|L| <= MAX_EXPONENT
        if self.D is not None:
            grow = self.grow[:, ::2] if self.D.dtype == complex else self.grow
            np.multiply(self.D, grow.reshape(self.scaled.shape), out=self.scaled)
        self.h = h


@dataclass
class StepController:
    """Hairer's DOPRI5 step-size controller (PI with Lund stabilisation).

    The state (``facold``) is part of a run's restart state: restoring it restores the step
    sequence exactly.
    """

    error_order: int
    safety: float = 0.9
    facmin: float = 0.2    # smallest ratio new/old step
    facmax: float = 10.0   # largest ratio new/old step
    beta: float = 0.04     # Lund stabilisation exponent (0 gives the classical I controller)
    facold: float = 1e-4

    def propose(self, h: float, err: float) -> tuple[bool, float]:
        """Accept or reject a step of size h with scaled error ``err`` (<= 1 accepts); next step size."""
        expo1 = 1.0 / (self.error_order + 1) - 0.75 * self.beta
        if not math.isfinite(err):
            return False, h * self.facmin
        fac11 = err ** expo1 if err > 0 else 0.0
        if err <= 1.0:
            fac = fac11 / self.facold ** self.beta if fac11 > 0 else 0.0
            fac = fac / self.safety
            fac = min(1.0 / self.facmin, max(1.0 / self.facmax, fac))
            self.facold = max(err, 1e-4)
            return True, h / fac
        return False, h / min(1.0 / self.facmin, fac11 / self.safety)

    def state(self) -> dict:
        return {"facold": self.facold}

    def restore(self, state: dict) -> None:
        self.facold = float(state["facold"])


# ----------------------------------------------------------------------------------------------
# the loop every representation shares
# ----------------------------------------------------------------------------------------------
#: mantissa bits an adaptive step keeps when the method has an integrating factor (see round_step)
STEP_BITS = 7


def round_step(h: float) -> float:
    """h rounded down to ``STEP_BITS`` bits of mantissa (a relative grid of 0.8-1.6%).

    The integrating factors e^{c h L} cost exponentials for every new step size; the controller's
    proposal (or a CFL bound) drifts slowly, so rounding it down keeps h, and the factors, for runs of
    steps at the price of steps shorter by 0.6% on average. The rounding is exact arithmetic
    (frexp/floor/ldexp): the same steps on every machine, and a restart repeats them."""
    if not (math.isfinite(h) and h > 0.0):
        return h
    m, e = math.frexp(h)
    return math.ldexp(math.floor(m * (1 << STEP_BITS)) / (1 << STEP_BITS), e)


class Integration:
    """One time integration by an (integrating-factor) explicit Runge–Kutta method: the loop, in the style
    of scipy's ``OdeSolver`` — the base owns time, step control, landing on snapshot times, the step
    budget and stop reasons; a representation (Fourier or spherical-harmonic coefficients, Lagrangian
    nodes, particles) supplies its state and what is particular to it.

    The constructor sets the loop's state (its parameters; a subclass calls it, then may change them
    before :meth:`integrate`):

    ``t``, ``t_final``, ``dt`` (the next step; for a fixed-step method its step), ``max_steps``
    ``nsteps``, ``nrejected``, ``controller`` (a :class:`StepController`; None: fixed steps)
    ``steps``         None, or a dict of lists "t", "dt", "error", "accepted" that logs every attempt
    ``f``             the right-hand side at ``state``, or None (computed on demand)
    ``tableau``, ``lin``  the method and its diagonal linear part (below)
    ``stop_request``, ``checkpoint``, ``checkpoint_every``  None, None, inf (below)

    A subclass has ``state``, the array the method steps (coefficients, positions), and gives (the
    protocol):

    ``rhs(t, u, last)``          the nonlinear part N(t, u) (see :class:`IFRungeKutta`); ``rhs_at_state()``
                             N at the current state (default ``rhs(t, state, True)``)
    ``rhs_scaled()``             None (default), or (n, D) with N = D * n, or (n, D, True) when ``n`` also
                             takes stages in factored form (IFRungeKutta's ``scaled``): the
                             same tuple object until the discretisation changes, since a new one (a refined
                             discretisation's) makes the base rebuild its stepper
    ``tableau``, ``lin``         the method and its diagonal linear part (None: none; a new array object
                             makes the base rebuild its stepper, e.g. after a refinement)
    ``error_norm(err, u, u_new)``  the scaled error of an adaptive step (<= 1 accepts)
    ``step_bound()``             the largest step allowed now (a CFL bound; default: none)
    ``min_step()``               below this a rejected step is a step size underflow (default 1e-14 |t|)
    ``next_landing()``           the next time steps must land on (default: :meth:`save_time`)
    ``save_time()``              the next snapshot time (default: t_final)
    ``before_step()``            a stop (reason, message) for the current state, or None (default)
    ``accept(u_new, f_new, h, lands)``  install an accepted step (the base has already advanced ``t``):
                                 normalise, filter, refine, merge, add noise, take snapshots; return a
                                 stop (reason, message) or None. ``f_new`` is N at ``u_new`` (FSAL
                                 methods) or None; set ``self.f`` to what the next step starts from.
    ``report(h)``                the progress dict after an accepted step

    ``stop_request``             optional: polled after every accepted step that did not end the run
                                 (t_final, max_steps, a stop of the subclass); when truthy the loop returns
                                 ("interrupted", ``stop_request.why``) at that step's state
                                 (:mod:`solvers.interrupts`)
    ``checkpoint``, ``checkpoint_every``  optional: ``checkpoint()`` is called after the first accepted step
                                 that ends ``checkpoint_every`` seconds (wall clock) after the loop
                                 started or after the previous call (to keep the state, e.g. in an archive)

    Step control lands on ``next_landing()`` by cutting the step that would pass it. That step is
    accepted or rejected like any other, but when accepted it does not set the next step: the run goes on
    with the step proposed before the cut (and the controller's memory as it was), unless the cut step
    proposes a larger one.

    :meth:`integrate` returns (stop reason, message): one of the subclass's own, or "t_final",
    "max_steps", "non-finite" (step size underflow or 20 non-finite attempts in a row), "interrupted".
    KeyboardInterrupt propagates: the state is that of the last accepted step.
    """

    #: fixed steps landing on a snapshot time are shortened; this relative slack keeps float round-off in t
    #: from adding a spurious tiny step
    LANDING_SLACK = 1e-9
    if TYPE_CHECKING:     # the state the loop steps: a representation's property (or attribute)
        @property
        def state(self) -> np.ndarray: ...
    #: the step after a rejected one does not grow (Hairer & Wanner's rule for stiff problems, where a step
    #: held by stability, not accuracy, would otherwise grow into a rejection again and again)
    HOLD_AFTER_REJECT = False

    def __init__(self, *, t: float, t_final: float, dt: float | None, tableau: "Tableau | RosenbrockTableau | None",
                 controller: StepController | None, max_steps: int, nsteps: int = 0, nrejected: int = 0,
                 steps: dict | None = None, f: np.ndarray | None = None, lin: np.ndarray | None = None) -> None:
        self.t, self.t_final, self.dt, self.max_steps = t, t_final, dt, max_steps
        self.nsteps, self.nrejected = nsteps, nrejected
        self.tableau, self.controller, self.lin = tableau, controller, lin
        self.steps, self.f = steps, f
        self.stop_request = None
        self.checkpoint: Callable[[], None] | None = None
        self.checkpoint_every = math.inf

    def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        raise NotImplementedError

    def error_norm(self, err: np.ndarray, u: np.ndarray, u_new: np.ndarray) -> float:
        raise NotImplementedError

    def step_bound(self) -> float:
        return math.inf

    def min_step(self) -> float:
        """A rejected step proposing less than this is a step size underflow: 1e-14 of the time (below it t + h
        rounds to t). An autonomous system whose late events are fast may take steps that t cannot resolve:
        its state still moves (the Lagrangian continuation's atoms, :mod:`solvers.lagrangian`)."""
        return 1e-14 * max(1.0, abs(self.t))

    def rhs_scaled(self) -> tuple | None:
        """None, or (n, D) with N(t, u) = D * n(t, u, last), or (n, D, True): see :class:`IFRungeKutta`."""
        return None

    def rhs_at_state(self) -> np.ndarray:
        """N at the current state when ``f`` is not known: the first stage of the next step. A restart
        computes it the same way, so it must be what the uninterrupted run would use."""
        return self.rhs(self.t, self.state, True)

    def save_time(self) -> float:
        return self.t_final

    def next_landing(self) -> float:
        return self.save_time()

    def before_step(self) -> tuple[str, str] | None:
        return None

    def accept(self, u_new: np.ndarray, f_new: np.ndarray | None, h: float, lands: bool) -> tuple[str, str] | None:
        raise NotImplementedError

    def report(self, h: float) -> dict:
        return {"dt": h, "nsteps": self.nsteps}

    def jacobian_factor(self, u: np.ndarray, g: float) -> Callable[[np.ndarray], np.ndarray]:
        """For a :class:`RosenbrockTableau` method: ``solve(b)``, the solution x of (I - g W) x = b with W an
        approximation of the Jacobian of ``rhs`` at u (:class:`Rosenbrock`)."""
        raise NotImplementedError

    def _stepper(self, lin, scaled):
        if isinstance(self.tableau, RosenbrockTableau):
            return Rosenbrock(self.rhs, self.tableau, self.jacobian_factor)
        return IFRungeKutta(self.rhs, self.tableau, lin, scaled)

    def integrate(self, progress: "Progress | Callable[[float, dict], None] | None" = None) -> tuple[str, str]:
        """Step until a stop (see the class docstring)."""
        lin, scaled, tableau = self.lin, self.rhs_scaled(), self.tableau
        stepper = self._stepper(lin, scaled)
        bad = 0
        held = False
        keeps = self.checkpoint is not None and math.isfinite(self.checkpoint_every)
        next_keep = time.perf_counter() + self.checkpoint_every if keeps else math.inf
        accepted = False
        while True:
            if self.lin is not lin or self.rhs_scaled() is not scaled or self.tableau is not tableau:
                # a new linear part or factor (a refined discretisation), or another method
                lin, scaled, tableau = self.lin, self.rhs_scaled(), self.tableau
                stepper = self._stepper(lin, scaled)
            stop = self.before_step()
            if stop is not None:
                return stop
            if self.t >= self.t_final:
                return "t_final", "reached t_final"
            if self.nsteps >= self.max_steps:
                return "max_steps", f"{self.max_steps} accepted steps"
            # polled here, after an accepted step the run goes on from: its state is one a restart reproduces
            # exactly (after a rejected attempt the loop's count of non-finite attempts would be lost; a step
            # that ended the run has returned its own stop above)
            if accepted and self.stop_request:
                return "interrupted", self.stop_request.why
            accepted = False
            t_land = self.next_landing()
            if self.controller is not None:
                h = min(self.dt, self.step_bound())
                if lin is not None:
                    h = round_step(h)
                h_free = h
                h = min(h, t_land - self.t)
                lands = h >= t_land - self.t
            else:
                lands = t_land - self.t <= self.dt * (1.0 + self.LANDING_SLACK)
                h = t_land - self.t if lands else self.dt
            if self.f is None:
                self.f = self.rhs_at_state()
            with np.errstate(all="ignore"):
                u_new, f_new, err = stepper.step(self.t, self.state, h, self.f)
                errn = self.error_norm(err, self.state, u_new) if self.controller is not None else 0.0
            if self.controller is not None:
                memory = self.controller.state() if lands and h < h_free else None
                ok, dt_new = self.controller.propose(h, errn if math.isfinite(errn) else math.inf)
                if self.steps is not None:
                    for key, val in (("t", self.t), ("dt", h), ("error", errn), ("accepted", ok)):
                        self.steps[key].append(val)
                self.dt = dt_new
                if not ok:
                    self.nrejected += 1
                    held = self.HOLD_AFTER_REJECT
                    bad = bad + 1 if not math.isfinite(errn) else 0
                    if bad >= 20 or not math.isfinite(dt_new) or dt_new < self.min_step():
                        return "non-finite", ("step size underflow" if math.isfinite(errn)
                                              else "non-finite right-hand side on 20 successive attempts"
                                              if bad >= 20 else "non-finite right-hand side")
                    continue
                # a step cut short to land says little about the step the run can take: its error is
                # small because it is short. Regrown from it, the run would come back over several steps,
                # each a new step size and so new integrating factors; the proposal before the cut stands
                # instead (the controller's memory as it was), unless the cut step proposes a larger one
                if memory is not None and self.dt < h_free:
                    self.controller.restore(memory)
                    self.dt = h_free
                elif held:
                    self.dt = min(self.dt, h)
                held = False
            bad = 0
            self.t = t_land if lands else self.t + h
            self.nsteps += 1
            stop = self.accept(u_new, f_new, h, lands)
            if stop is not None:
                return stop
            # a Progress (asked first whether it wants this step's dict), or a plain callable
            if progress is not None and getattr(progress, "wants", always)(self.t):
                progress(self.t, self.report(h))
            accepted = True
            if keeps and time.perf_counter() >= next_keep:
                self.checkpoint()
                next_keep = time.perf_counter() + self.checkpoint_every
