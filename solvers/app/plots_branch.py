"""The bifurcation diagram of a branch (``<stem>_branch.png`` of `attnpde branch`).

Above, the mode's amplitude against nu (stable solid, unstable dashed; the uniform state at amplitude 0,
stable where nu is above the threshold); below, F - F_uniform against nu (F itself with a perceptron), so that
the transition shows as the stable branch crossing 0. Where the branch folds, the left column draws the whole
branch and the right one zooms onto the window between the threshold and the fold, where a subcritical
branch's bistability lives (often a few percent of the range wide), with the threshold, the fold and the
transition marked in both; the lower zoom's vertical scale is that of F - F_u within the window. The x range
is the branch's own (where its points are), not the whole noise range followed. The legend is under the
panels.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model import Model
from ..branches import Branch
from .plots_base import LABEL_SIZE, NOTE_SIZE, plt

__all__ = ["plot_branch", "branch_title"]

#: the zoom's margin on each side of [threshold, fold], as a fraction of that window's width
ZOOM_MARGIN = 0.35


def branch_title(model: Model, name: str = "") -> str:
    p = model.perceptron
    perc = "no perceptron" if p is None else f"{p.activation} perceptron ({p.units} units)"
    return (f"{name + ': ' if name else ''}S^{model.d - 1}, USA, beta={model.beta:g}, gamma={model.strength:g}, "
            f"{model.flow}, {perc}")


def _segments(x: np.ndarray, y: np.ndarray, stable: np.ndarray, side: np.ndarray):
    """Runs of consecutive points of one side and one stability: (x, y, stable)."""
    start = 0
    for i in range(1, len(x) + 1):
        if i == len(x) or stable[i] != stable[start] or side[i] != side[start] and side[i] != 0 and side[start] != 0:
            # the boundary point is shared, so that the curve has no gap
            yield x[start:i + 1], y[start:i + 1], bool(stable[start])
            start = i


def _window(branch: Branch) -> tuple[float, float] | None:
    """The zoom's nu range: the threshold, folds and transition with a margin; None without a fold, or when
    they already fill a fifth of the branch's range."""
    if not branch.folds or branch.threshold is None or branch.kind == "imperfect":
        return None
    nus = [branch.threshold] + [e["nu"] for e in branch.folds] + ([branch.transition] if branch.transition else [])
    a, b = min(nus), max(nus)
    lo, hi = _x_range(branch)
    if b - a > 0.2 * (hi - lo):
        return None
    pad = ZOOM_MARGIN * (b - a) + 1e-12
    return a - pad, b + pad


def _x_range(branch: Branch) -> tuple[float, float]:
    """Where the branch lives: its points' nu, with the threshold, and a margin of 3 %."""
    nus = list(branch.noise) + ([branch.threshold] if branch.threshold is not None else [])
    a, b = float(np.min(nus)), float(np.max(nus))
    pad = 0.03 * (b - a) + 1e-12
    lo, hi = branch.noise_range
    return max(lo, a - pad), min(hi, b + pad)


def _draw(ax, axf, branch: Branch, x0: float, x1: float, zoom: bool) -> None:
    """The branch, the uniform state and the events in one column, on [x0, x1]."""
    keep = branch.side >= 0 if branch.kind in ("supercritical", "subcritical") else np.ones(len(branch.noise), bool)
    nu, amp, st, side = branch.noise[keep], branch.amplitude[keep], branch.stable[keep], branch.side[keep]
    fu = branch.free_energy_uniform
    dF = branch.free_energy[keep] - (fu if fu is not None else 0.0)
    for xs, ys, s in _segments(nu, amp, st, side):
        ax.plot(xs, ys, "-" if s else "--", color="C0", lw=1.8 if s else 1.3)
    for xs, ys, s in _segments(nu, dF, st, side):
        axf.plot(xs, ys, "-" if s else "--", color="C0", lw=1.8 if s else 1.3)
    if branch.threshold is not None and branch.kind != "imperfect":
        nc = branch.threshold
        for a in (ax, axf):
            a.plot([nc, x1], [0, 0], "-", color="k", lw=1.3)
            a.plot([x0, nc], [0, 0], "--", color="k", lw=1.1)
        ax.plot([nc], [0], "o", color="k", ms=6, zorder=4)
    for e in branch.folds:
        ax.plot([e["nu"]], [e["amplitude"]], "X", color="C3", ms=10, mec="k", mew=0.6, zorder=4)
        if fu is not None:
            axf.plot([e["nu"]], [e["free_energy"] - fu], "X", color="C3", ms=10, mec="k", mew=0.6, zorder=4)
    for e in branch.bifurcations:
        ax.plot([e["nu"]], [e["amplitude"]], "D", color="C2", ms=7, zorder=4)
    if branch.transition is not None:
        for a in (ax, axf):
            a.axvline(branch.transition, color="C1", ls="-.", lw=1.3)
    ax.set_xlim(x0, x1)
    near = (nu >= x0) & (nu <= x1)
    if zoom and near.any():
        top = float(np.max(amp[near]))
        ax.set_ylim(-0.06 * top, 1.1 * top)
        d = dF[near]
        lo, hi = min(float(np.min(d)), 0.0), max(float(np.max(d)), 0.0)
        pad = 0.08 * (hi - lo) + 1e-300
        axf.set_ylim(lo - pad, hi + pad)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(4 if zoom else 6))
    for a in (ax, axf):
        a.grid(alpha=0.3)
        a.tick_params(labelsize=NOTE_SIZE)


def plot_branch(branch: Branch, path: str | Path, title: str = "") -> Path:
    """Write the bifurcation diagram of ``branch`` (module docstring) to ``path``."""
    from matplotlib.lines import Line2D
    pyplot = plt()

    window = _window(branch)
    ncol = 2 if window is not None else 1
    fig, axes = pyplot.subplots(2, ncol, figsize=(6.2 * ncol + 0.6, 7.6), sharex="col", squeeze=False,
                                gridspec_kw={"height_ratios": [3, 2]})
    x0, x1 = _x_range(branch)
    _draw(axes[0, 0], axes[1, 0], branch, x0, x1, zoom=False)
    if window is not None:
        _draw(axes[0, 1], axes[1, 1], branch, *window, zoom=True)
        axes[0, 0].axvspan(*window, color="0.85", lw=0, zorder=0)
        axes[0, 1].set_title("zoom: threshold, transition, fold", fontsize=LABEL_SIZE)
        axes[0, 0].set_title("the whole branch (zoom shaded)", fontsize=LABEL_SIZE)
    what = "|c_k|" if branch.model.d == 2 else "sqrt(sum_m |c_lm|^2)"
    axes[0, 0].set_ylabel(f"amplitude of mode {branch.mode}: {what}" if branch.mode else "distance to uniform (L2)")
    fu = branch.free_energy_uniform
    axes[1, 0].set_ylabel("F - F_uniform" if fu is not None else "free energy F")
    for a in axes[1]:
        a.set_xlabel("noise nu")
    handles = [Line2D([], [], color="0.3", lw=1.8, label="stable"),
               Line2D([], [], color="0.3", ls="--", lw=1.3, label="unstable")]
    if branch.threshold is not None and branch.kind != "imperfect":
        handles.append(Line2D([], [], ls="none", marker="o", color="k", ms=6,
                              label=f"threshold nu = {branch.threshold:.6g}"))
    if branch.folds:
        at = ", ".join(f"{e['nu']:.6g}" for e in branch.folds[:3])
        handles.append(Line2D([], [], ls="none", marker="X", color="C3", mec="k", mew=0.6, ms=10,
                              label="fold" + ("s" if len(branch.folds) > 1 else "") + f" nu = {at}"))
    if branch.transition is not None:
        handles.append(Line2D([], [], ls="-.", color="C1", lw=1.3, label=f"transition nu = {branch.transition:.6g}"))
    if branch.bifurcations:
        handles.append(Line2D([], [], ls="none", marker="D", color="C2", ms=7, label="bifurcation"))
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=NOTE_SIZE, frameon=False)
    kind = f"{branch.kind} " if branch.kind else ""
    raised = getattr(branch, "refinements", None)
    degree = f"degree {branch.degree}" + (" (raised from " + str(raised[0]["from"]) + ")" if raised else "")
    head = f"{kind}branch of mode {branch.mode} ({branch.representation}, {degree})"
    fig.suptitle(f"{title}\n{head}" if title else head, fontsize=LABEL_SIZE)
    rows = (len(handles) + 2) // 3
    fig.tight_layout(rect=(0, 0.035 + 0.03 * rows, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=100)
    pyplot.close(fig)
    return path
