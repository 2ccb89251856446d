"""The energy figure of a run (``energy.png``): the energy of both solvers against time, with the PDE's plateaus
(shaded from entered to certified, labelled inside the panel), its slow stages (shaded from entered to left)
and its certified end; beside it the solvers'
diagnostics on the same time axis: the spectral solver's tail and max rho up to the handoff, the node
continuation's largest speed and node count after it.

A spectral phase with fewer than three snapshots, or too short to be seen on the run's time axis (the circle
runs with ReLU hand off at t = 0.02), gets no panels: the energy panel's title says when it ended.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots_base import (LABEL_SIZE, NOTE_SIZE, apply_time_axis, legend_below, mark_handoff, plt,
                         readable_log_axis, run_time_axis, save, title)

__all__ = ["energy_figure"]

#: the spectral phase gets its panels when it holds this many snapshots and this fraction of the time axis
SPECTRAL_SNAPSHOTS = 3
SPECTRAL_SHARE = 0.05


def _spectral_snapshots(pde) -> np.ndarray:
    """Which snapshots are of the spectral solver (before the handoff: no node measure)."""
    return np.array([pde.node_measure(int(i)) is None for i in range(len(pde.t))])


def energy_figure(run, out: Path) -> Path:
    """Energy against time (plateaus and the certified end marked); the spectral solver's diagnostics up to
    the handoff, the node continuation's after it, on the run's time axis."""
    pyplot = plt()
    pde, part = run.pde, run.particles
    ta = run_time_axis(run)
    handoff = pde.t_handoff if pde is not None else None
    spectral = None
    if pde is not None:
        keep = _spectral_snapshots(pde)
        end = handoff if handoff is not None else float(pde.t[-1])
        share = float(ta.forward(end) / ta.forward(ta.hi)) if ta.hi > 0 else 1.0
        if keep.sum() >= SPECTRAL_SNAPSHOTS and share >= SPECTRAL_SHARE:
            spectral = keep
    nodes = pde is not None and handoff is not None and any(n is not None for n in (pde.nodes or []))
    ncol = 1 + (spectral is not None) + bool(nodes)
    fig = pyplot.figure(figsize=(6.0 + 4.6 * (ncol - 1), 7.4))
    grid = fig.add_gridspec(2, ncol, width_ratios=[1.3] + [1.0] * (ncol - 1))
    ax = fig.add_subplot(grid[:, 0])
    labels = []
    if pde is not None:
        ax.plot(pde.t, pde.energy, "o-", ms=3, label="PDE")
    if part is not None and getattr(part, "energy", None) is not None:
        ax.plot(part.t, part.energy, "-", label=f"particles (N = {part.x.shape[1]})")
    apply_time_axis(ax, ta)
    ax.set_ylabel("energy E")
    for k, pl in enumerate(getattr(pde, "plateaus", None) or []):
        ax.axvspan(pl.t_entered, pl.t_certified, color="C2", alpha=0.2, lw=0,
                   label="plateau: entered -> certified" if k == 0 else None)
        ax.hlines(pl.energy, pl.t_entered, pl.t_certified, color="C2", lw=2)
        # inside the panel, under the plateau's level (moved inside and off other text when saved)
        labels.append(ax.annotate(f"plateau {k + 1}: E = {pl.energy:.4f}\n{len(pl.masses)} atoms, growth "
                                  f"{pl.growth:.3g}", (pl.t_entered, pl.energy), xytext=(0, -8),
                                  textcoords="offset points", ha="left", va="top", fontsize=NOTE_SIZE, color="C2"))
    for k, st in enumerate(getattr(pde, "slow_stages", None) or []):
        left = st.t_left if np.isfinite(st.t_left) else float(pde.t[-1])
        ax.axvspan(st.t_entered, left, color="C4", alpha=0.12, lw=0,
                   label="slow stage: forces unbalanced" if k == 0 else None)
        labels.append(ax.annotate(f"slow stage {k + 1}: an atom of {st.mass:.3f}\nat {st.speed:.1e} rad per unit time",
                                  (st.t_entered, float(np.interp(st.t_entered, pde.t, pde.energy))), xytext=(2, 8),
                                  textcoords="offset points", ha="left", va="bottom", fontsize=NOTE_SIZE, color="C4"))
    terminal = getattr(pde, "terminal", None) if pde is not None else None
    if terminal is not None:
        ax.plot([terminal.t], [terminal.energy], "*", color="C3", ms=14, mec="k", zorder=5, clip_on=False,
                label=f"certified end t = {terminal.t:.4g}: {len(terminal.masses)} atom(s), {terminal.verdict}")
    mark_handoff(ax, handoff, labels=labels)
    legend_below(ax)
    head = "energy"
    if pde is not None and spectral is None and handoff is not None:
        n = int(_spectral_snapshots(pde).sum())
        head += f"\n(spectral solver to the handoff at t = {handoff:.3g}: {n} snapshot{'s' if n != 1 else ''})"
    ax.set_title(head, fontsize=LABEL_SIZE)
    col = 1
    if spectral is not None:
        _spectral_panels(fig, grid, col, pde, spectral, handoff, ta, labels)
        col += 1
    if nodes:
        _continuation_panels(fig, grid, col, pde, handoff, ta, terminal, labels)
    fig.suptitle(title(run), fontsize=LABEL_SIZE)
    return save(fig, out / "energy.png", labels)


def _spectral_panels(fig, grid, col: int, pde, keep: np.ndarray, handoff: float | None, ta, labels: list) -> None:
    """The spectral tail (with its threshold and the refinements) and max rho, up to the handoff only: past it
    the series is the smoothed node measure, whose tail and maximum say nothing about accuracy."""
    t = np.asarray(pde.t, dtype=float)
    ts = t[keep]
    a1 = fig.add_subplot(grid[0, col])
    a2 = fig.add_subplot(grid[1, col], sharex=a1)
    a1.semilogy(ts, np.maximum(pde.tail[keep], 1e-17), "o-", ms=3, color="C0")
    tail_max = pde.options.get("tail_max", 1e-3)
    a1.axhline(tail_max, color="0.4", ls=":", lw=1)
    labels.append(a1.annotate("tail_max", (0.0, tail_max), xycoords=a1.get_yaxis_transform(), xytext=(3, -3),
                              textcoords="offset points", ha="left", va="top", fontsize=NOTE_SIZE, color="0.3"))
    a1.set_ylabel("spectral tail")
    readable_log_axis(a1)
    a2.semilogy(ts, pde.density.reshape(len(t), -1)[keep].max(axis=1), "s-", ms=3, color="C1")
    a2.set_ylabel("max rho (uniform = 1)")
    readable_log_axis(a2)
    apply_time_axis(a2, ta)
    a1.tick_params(labelbottom=False)
    unit = pde.space.resolution_symbol
    end = handoff if handoff is not None else float(t[-1])
    for tr, _, new in pde.refinements:
        if tr <= end:
            for a in (a1, a2):
                a.axvline(tr, color="0.6", ls=":", lw=1)
            labels.append(a1.annotate(f"{unit}={int(new)}", (tr, 0.0), xycoords=a1.get_xaxis_transform(),
                                      xytext=(2, 3), textcoords="offset points", ha="left", va="bottom",
                                      fontsize=NOTE_SIZE, color="0.3"))
    if handoff is not None:
        for a in (a1, a2):
            mark_handoff(a, handoff, labels=labels)
    span = f"t = 0 .. {end:.3g} (handoff)" if handoff is not None else f"t = 0 .. {end:.4g}"
    a1.set_title(f"spectral solver, {span}", fontsize=LABEL_SIZE)


def _continuation_panels(fig, grid, col: int, pde, handoff: float, ta, terminal, labels: list) -> None:
    """The node continuation from the handoff: the largest node speed and the number of nodes."""
    t = np.asarray(pde.t, dtype=float)
    idx = [i for i in range(len(t)) if pde.nodes and pde.nodes[i] is not None]
    tn = t[idx]
    speed = np.array([float(pde.nodes[i]["max_drift"]) for i in idx])
    count = np.array([len(pde.nodes[i]["w"]) for i in idx])
    a1 = fig.add_subplot(grid[0, col])
    a2 = fig.add_subplot(grid[1, col], sharex=a1)
    shown = speed > 0
    a1.semilogy(tn[shown], speed[shown], "o-", ms=3, color="C4")
    if terminal is not None:
        from ..terminal import CERTIFICATE
        a1.axhline(CERTIFICATE, color="C3", ls=":", lw=1)
        labels.append(a1.annotate("certificate's bound (and forces balanced to 1e-9)", (0.0, CERTIFICATE),
                                  xycoords=a1.get_yaxis_transform(),
                                  xytext=(3, 3), textcoords="offset points", ha="left", va="bottom",
                                  fontsize=NOTE_SIZE, color="C3"))
        a1.plot([terminal.t], [max(terminal.max_speed, CERTIFICATE)], "*", color="C3", ms=12, mec="k", clip_on=False)
    for pl in getattr(pde, "plateaus", None) or []:
        for a in (a1, a2):
            a.axvspan(pl.t_entered, pl.t_certified, color="C2", alpha=0.2, lw=0)
    a1.set_ylabel("max |v| over the nodes")
    readable_log_axis(a1)
    a2.plot(tn, count, "-", drawstyle="steps-post", color="C5")
    a2.set_ylabel("nodes")
    a2.set_ylim(0, None)
    apply_time_axis(a2, ta)
    for a in (a1, a2):
        mark_handoff(a, handoff, labels=labels)
    a1.tick_params(labelbottom=False)
    a1.set_title(f"node continuation from the handoff\nat t = {handoff:.3g}", fontsize=LABEL_SIZE)
