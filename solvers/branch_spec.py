"""What one branch of stationary states is: the continuation's step control (:class:`ContinuationOptions`) and
the resolved, frozen spec of a branch from the uniform state (:class:`BranchSpec`), whose
:meth:`~BranchSpec.resolve` fills every default once (the degrees, the representation). A field that a
configuration file may set declares its check (``solvers.fields.toml``): the file's [branch] table is made from them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from spectral.multipliers import kernel_bandwidth
from . import validators as check
from .fields import DEGREE_MAX, DEGREE_WHY, POS, Array, Choice, Int, toml
from .model import Model
from .stationary_problems import (KERNEL_TOL, REPRESENTATIONS, _check_model, _is_even_potential, _is_zonal_potential,
                                  _min_degree)

__all__ = ["BranchSpec", "ContinuationOptions", "BRANCH_DEGREE", "BRANCH_MAX_DEGREE", "branch_degrees"]

#: a branch's resolution: where it starts (Fourier modes K on S^1, degree L on S^2) and the most it is raised to
#: when its states sharpen (ContinuationOptions.max_degree), by manifold (d)
BRANCH_DEGREE = {2: 64, 3: 32}
BRANCH_MAX_DEGREE = {2: 256, 3: 128}
#: a degree of a configuration file's [branch] table
BRANCH_DEGREE_FIELD = Int(min=4, max=DEGREE_MAX, why=DEGREE_WHY)


# --- continuation ------------------------------------------------------------------------------------------
@dataclass
class ContinuationOptions:
    """Step control of the pseudo-arclength continuation (module Notes). Steps are arclengths in
    X = (x, nu / nu_ref), x the reduced unknowns (orthonormal coordinates of rho; S^1: sqrt 2 Re c_k).

    Attributes
    ----------
    first_step : float
        The first step from a branch point or a state (small: the kind is read from the first points).
    max_step, min_step : float
        Bounds of the step; below ``min_step`` the side stops ("step").
    max_points : int
        Points per side of a branch (both sides: twice as many).
    max_angle : float
        Largest turn of the tangent per step (radians); a step that turns more is halved.
    tol : float
        The corrector stops at max |x - T(x)| <= tol.
    max_corrections : int
        Newton steps of one correction; a correction that needs more is retried at half the step.
    tail_max : float
        A point whose spectral tail at the degree exceeds this is not resolved: :func:`branch_from_uniform`
        follows the branch again from the start at twice the degree (up to ``max_degree``; ``Branch.refinements``
        says where and why), and at ``max_degree`` the side stops there ("resolution").
    max_degree : int or None
        The largest degree a branch from the uniform state is raised to; None: ``BRANCH_MAX_DEGREE`` of the
        manifold (256 on S^1, 128 on S^2), or the starting degree if larger.
    """

    first_step: float = field(default=1e-3, metadata=toml(POS))
    max_step: float = field(default=0.05, metadata=toml(POS))
    min_step: float = field(default=1e-7, metadata=toml(POS))
    max_points: int = field(default=100, metadata=toml(Int(min=2)))
    max_angle: float = field(default=0.1, metadata=toml(POS))
    tol: float = field(default=1e-12, metadata=toml(POS))
    max_corrections: int = field(default=8, metadata=toml(Int(min=2)))
    tail_max: float = field(default=1e-8, metadata=toml(POS))
    max_degree: int | None = field(default=None, metadata=toml(BRANCH_DEGREE_FIELD))

    def __post_init__(self) -> None:
        for name in ("first_step", "max_step", "min_step", "max_angle", "tol", "tail_max"):
            setattr(self, name, check.number(f"continuation option {name}", getattr(self, name), gt=0))
        check.integer("continuation option max_points", self.max_points, ge=2)
        check.integer("continuation option max_degree", self.max_degree, ge=4, allow_none=True)
        check.integer("continuation option max_corrections", self.max_corrections, ge=2)
        if self.min_step > self.first_step or self.first_step > self.max_step:
            raise ValueError(f"continuation options: need min_step <= first_step <= max_step, got {self.min_step:g}, "
                             f"{self.first_step:g}, {self.max_step:g}")

    @classmethod
    def from_kwargs(cls, options: dict) -> "ContinuationOptions":
        check.known_options("branch_from_uniform / continue_branch", options,
                            [f for f in cls.__dataclass_fields__])
        return cls(**options)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def branch_degrees(d: int, degree: int | None = None, max_degree: int | None = None) -> tuple[int, int]:
    """(the starting degree, the largest it is raised to) of a branch on S^{d-1}: ``BRANCH_DEGREE`` and
    ``BRANCH_MAX_DEGREE`` by default, the cap at least the start."""
    start = BRANCH_DEGREE[d] if degree is None else int(degree)
    cap = max(BRANCH_MAX_DEGREE[d], start) if max_degree is None else int(max_degree)
    return start, cap


def _check_range(noise_range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in noise_range)
    except (TypeError, ValueError):
        raise ValueError(f"noise_range must be a pair (lo, hi) of numbers, got {noise_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ValueError(f"noise_range must be (lo, hi) with 0 < lo < hi, got {noise_range!r}")
    return lo, hi


@dataclass(frozen=True)
class BranchSpec:
    """One branch from the uniform state (``branches.branch_from_uniform``), every default resolved but the noise
    range's, (0.25, 1.5) times the threshold, which the problem's threshold sets when it is set up.

    Attributes
    ----------
    model : Model
    mode : int
        The Fourier mode k (S^1) or harmonic degree l (S^2) leaving the uniform state.
    degree : int
        The starting resolution (``BRANCH_DEGREE`` unless given).
    noise_range : (lo, hi) or None
        The range of nu followed (None: from the threshold).
    representation : str
        "even" / "full" (S^1), "zonal" / "general" (S^2), resolved from the model's symmetry unless given.
    options : ContinuationOptions
        With ``max_degree`` resolved (``BRANCH_MAX_DEGREE``, at least the starting degree, unless given).
    """

    model: Model
    mode: int = field(default=1, metadata=toml(Int(min=1)))
    noise_range: tuple | None = field(default=None, metadata=toml(Array(1)))
    degree: int = field(default=0, metadata=toml(BRANCH_DEGREE_FIELD))
    representation: str = field(default="auto", metadata=toml(Choice(REPRESENTATIONS)))
    options: ContinuationOptions = field(default_factory=ContinuationOptions)

    @classmethod
    def resolve(cls, model: Model, mode: int = 1, degree: int | None = None, noise_range=None, *,
                representation: str = "auto", **options) -> "BranchSpec":
        """The spec of ``branch_from_uniform(model, mode, degree, noise_range, representation=, **options)``:
        its arguments checked (ValueError, TypeError) and its defaults filled in."""
        _check_model(model, "branch_from_uniform")
        check.integer("mode", mode, ge=1)
        opts = ContinuationOptions.from_kwargs(options)
        if model.flow != "ascent":
            raise ValueError("branch_from_uniform: in descent the uniform state is stable at every noise (S = I + "
                             "(gamma/nu) G^(1/2) C G^(1/2) > 0): no branch leaves it; use flow='ascent'")
        if model.beta == 0 and mode >= 2:
            raise ValueError(f"branch_from_uniform: at beta = 0 the kernel has degree 1 only: mode {mode} has no "
                             "threshold")
        check.integer("degree", degree, ge=4, allow_none=True)
        degree, cap = branch_degrees(model.d, degree, opts.max_degree)
        if cap < degree:
            raise ValueError(f"max_degree {cap} must be >= degree {degree} (the degree the branch starts from)")
        need = _min_degree(model.d, mode)
        if degree < need:
            raise ValueError(f"degree {degree} cannot represent mode {mode}: need degree >= {need} "
                             f"({'K > k Fourier modes' if model.d == 2 else 'L >= l'})")
        bw = kernel_bandwidth(model.beta, model.d, KERNEL_TOL)
        if mode > bw:
            raise ValueError(f"mode {mode} is beyond the kernel's bandwidth at beta = {model.beta:g} (degree {bw}: "
                             "g_l <= 1e-17 g_0 above it): its threshold is below round-off")
        if representation == "auto":
            if model.d == 2:
                representation = "even" if _is_even_potential(model) else "full"
            else:
                representation = "zonal" if _is_zonal_potential(model) else "general"
        check.choice("representation", representation, REPRESENTATIONS[1:])
        noise = None if noise_range is None else _check_range(noise_range)
        return cls(model=model, mode=int(mode), degree=int(degree), noise_range=noise,
                   representation=representation, options=replace(opts, max_degree=cap))

    def at_degree(self, degree: int) -> "BranchSpec":
        """The same branch started at another degree (a resume after the degree was raised)."""
        return replace(self, degree=int(degree))
