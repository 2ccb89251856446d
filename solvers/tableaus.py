"""The methods the time stepping (:mod:`solvers.stepping`) runs, as data: explicit Runge–Kutta tableaus
(Butcher form, embedded error weights) and linearly implicit Rosenbrock(-W) tableaus (Hairer & Wanner's
alpha, Gamma form, converted once to the form the stepper uses without matrix-vector products).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Tableau", "DP54", "BS32", "RK4", "EULER", "TABLEAUS", "RosenbrockTableau", "ROS2", "ROS34PW2", "RODASP"]


@dataclass(frozen=True)
class Tableau:
    """Butcher tableau of an explicit method, with embedded error weights ``e = b - bhat``."""

    name: str
    c: tuple[float, ...]
    A: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    e: tuple[float, ...] | None
    order: int
    error_order: int | None
    fsal: bool

    @property
    def stages(self) -> int:
        return len(self.c)


DP54 = Tableau(
    name="DP54",
    c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
    A=((),
       (1 / 5,),
       (3 / 40, 9 / 40),
       (44 / 45, -56 / 15, 32 / 9),
       (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
       (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
       (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)),
    b=(35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0),
    e=(71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40),
    order=5, error_order=4, fsal=True,
)

BS32 = Tableau(
    name="BS32",
    c=(0.0, 1 / 2, 3 / 4, 1.0),
    A=((), (1 / 2,), (0.0, 3 / 4), (2 / 9, 1 / 3, 4 / 9)),
    b=(2 / 9, 1 / 3, 4 / 9, 0.0),
    e=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),
    order=3, error_order=2, fsal=True,
)

RK4 = Tableau(
    name="RK4",
    c=(0.0, 0.5, 0.5, 1.0),
    A=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
    b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
    e=None, order=4, error_order=None, fsal=False,
)

EULER = Tableau(name="Euler", c=(0.0,), A=((),), b=(1.0,), e=None, order=1, error_order=None, fsal=False)

TABLEAUS = {t.name: t for t in (DP54, BS32, RK4, EULER)}


@dataclass(frozen=True)
class RosenbrockTableau:
    """A linearly implicit (Rosenbrock-W) method, given as in Hairer & Wanner (IV.7) by its stage weights
    ``alpha`` (strictly lower), ``Gamma`` (lower, constant diagonal gamma), weights ``b`` and embedded
    weights ``bhat``, and stepped in the form without matrix-vector products:

        (I - gamma h W) k_i = F(u + h sum_{j<i} a_ij k_j) + sum_{j<i} c_ij k_j,
        u_new = u + h sum_i m_i k_i,   err = h sum_i e_i k_i,

    a = gamma alpha Gamma^-1, c = -gamma Gamma^-1 below the diagonal, m = gamma b Gamma^-1, e = m -
    gamma bhat Gamma^-1. W approximates the Jacobian dF/du; a W-method keeps its order for any W."""

    name: str
    alpha: tuple[tuple[float, ...], ...]
    Gamma: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    bhat: tuple[float, ...]
    order: int
    error_order: int
    # the form the stepper uses, derived in __post_init__
    gamma: float = field(init=False, repr=False, compare=False)
    a: np.ndarray = field(init=False, repr=False, compare=False)
    c: np.ndarray = field(init=False, repr=False, compare=False)
    m: np.ndarray = field(init=False, repr=False, compare=False)
    e: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        G = np.array(self.Gamma, dtype=float)
        g = float(G[0, 0])
        Gi = np.linalg.inv(G)
        object.__setattr__(self, "gamma", g)
        object.__setattr__(self, "a", np.tril(g * np.array(self.alpha, dtype=float) @ Gi, -1))
        object.__setattr__(self, "c", np.tril(-g * Gi, -1))
        m = g * np.array(self.b, dtype=float) @ Gi
        object.__setattr__(self, "m", m)
        object.__setattr__(self, "e", m - g * np.array(self.bhat, dtype=float) @ Gi)

    @property
    def stages(self) -> int:
        return len(self.b)


_G2 = 1.0 + 1.0 / math.sqrt(2.0)
#: ROS2 (Verwer, Spee, Blom, Hundsdorfer, SIAM J. Sci. Comput. 20, 1999): second order for any W, L-stable
#: for the exact Jacobian; its embedded solution is the linearly implicit Euler step. With W = 0 it is
#: Heun's method.
ROS2 = RosenbrockTableau(name="ROS2", alpha=((0.0, 0.0), (1.0, 0.0)), Gamma=((_G2, 0.0), (-2.0 * _G2, _G2)),
                         b=(0.5, 0.5), bhat=(1.0, 0.0), order=2, error_order=1)

_G4 = 4.3586652150845900e-01
#: ROS34PW2 (Rang & Angermann, BIT 45, 2005): a W-method of order 3 for any W, with an embedded method of
#: order 2; L-stable, and stiffly accurate (its last stage is the new state).
ROS34PW2 = RosenbrockTableau(
    name="ROS34PW2",
    alpha=((0.0, 0.0, 0.0, 0.0),
           (8.7173304301691801e-01, 0.0, 0.0, 0.0),
           (8.4457060015369423e-01, -1.1299064236484185e-01, 0.0, 0.0),
           (0.0, 0.0, 1.0, 0.0)),
    Gamma=((_G4, 0.0, 0.0, 0.0),
           (-8.7173304301691801e-01, _G4, 0.0, 0.0),
           (-9.0338057013044082e-01, 5.4180672388095326e-02, _G4, 0.0),
           (2.4212380706095346e-01, -1.2232505839045147e+00, 5.4526025533510214e-01, _G4)),
    b=(2.4212380706095346e-01, -1.2232505839045147e+00, 1.5452602553351020e+00, _G4),
    bhat=(3.7810903145819369e-01, -9.6042292212423178e-02, 0.5, 2.1793326075422950e-01),
    order=3, error_order=2)


_RODASP_ALPHA = (
    (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    (0.75, 0.0, 0.0, 0.0, 0.0, 0.0),
    (8.6120400814152190e-02, 0.1238795991858478, 0.0, 0.0, 0.0, 0.0),
    (0.7749345355073236, 0.1492651549508680, -0.2941996904581916, 0.0, 0.0, 0.0),
    (5.308746682646142, 1.330892140037269, -5.374137811655562, -0.2655010110278497, 0.0, 0.0),
    (-1.764437648774483, -0.4747565572063027, 2.369691846915802, 0.6195023590649829, 0.25, 0.0))
#: beta = alpha + Gamma below the diagonal (the published form)
_RODASP_BETA = (
    (0.0, 0.0, 0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0, 0.0, 0.0),
    (-0.049392, -0.014112, 0.0, 0.0, 0.0),
    (-0.4820494693877561, -0.1008795555555556, 0.9267290249433117, 0.0, 0.0),
    (-1.764437648774483, -0.4747565572063027, 2.369691846915802, 0.6195023590649829, 0.0),
    (-8.0368370789113464e-02, -5.6490613592447572e-02, 0.4882856300427991, 0.5057162114816189,
     -0.1071428571428569))
#: RODASP (Steinebach, 1995; Hairer & Wanner, IV.7): a Rosenbrock method of order 4 with an embedded method of
#: order 3, both L-stable and stiffly accurate (the new state and the embedded one are stages), gamma = 1/4. It
#: needs the exact Jacobian (it is not a W-method); for a few atoms that is cheap, and its higher order takes the
#: atom system's long slow drifts in fewer steps than ROS34PW2.
RODASP = RosenbrockTableau(
    name="RODASP", alpha=_RODASP_ALPHA,
    Gamma=tuple(tuple((_RODASP_BETA[i][j] - _RODASP_ALPHA[i][j]) if j < i else (0.25 if j == i else 0.0)
                      for j in range(6)) for i in range(6)),
    b=(*_RODASP_BETA[5], 0.25),
    bhat=(*_RODASP_BETA[4][:4], 0.25, 0.0),
    order=4, error_order=3)
