"""The figure of ``attnpde extremum``: the first variation over the sphere with the extremum's measure, and the
flow's certified end beside it.

Descent: Phi_mu - lambda for the minimiser mu (>= 0 everywhere, 0 on the support: the certificate seen), the
atoms as stems of their masses. Ascent: max V - V (>= 0, 0 at the maximisers, where the Dirac sits). Both on
a logarithmic scale from 1e-16, where the touches at the support show. S^1: a curve over the angle, the atoms
below on their own axis; S^2: an equirectangular map (longitude, latitude), the atoms as discs of area
proportional to mass. The end's atoms (a TerminalState, or any object with
``positions`` and ``masses``) are drawn hollow beside them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..landscape import Extremum

__all__ = ["plot_extremum", "landscape_values"]

LABEL_SIZE = 10
#: the smallest value drawn on the logarithmic scales (round-off of Phi)
FLOOR = 1e-16


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def landscape_values(ext: Extremum, x: np.ndarray) -> tuple[np.ndarray, str]:
    """The drawn function at unit vectors x, >= 0 everywhere and 0 on the extremum's support: Phi - lambda
    (descent; zero for the uniform minimiser) or max V - V (ascent), and its label."""
    model = ext.model
    if ext.kind == "minimum":
        if len(ext.masses) == 0:
            return np.zeros(len(x)), "Phi - lambda (the uniform minimiser: Phi constant)"
        phi, _ = model.first_variation_direct(x, ext.positions, ext.masses)
        lam = float(ext.masses @ model.first_variation_direct(ext.positions, ext.positions, ext.masses)[0])
        return phi - lam, "Phi_mu - lambda (first variation at the minimiser)"
    v = model.potential(x)
    top = float(np.max(model.potential(ext.positions))) if len(ext.masses) else 0.0
    return top - v, "max V - V (the maximiser's Dirac sits at 0)"


def _title(ext: Extremum, title: str) -> str:
    m = ext.model
    p = m.perceptron
    perc = "no perceptron" if p is None else f"{p.activation} perceptron ({p.units} units)"
    return (f"{title + ': ' if title else ''}S^{m.d - 1}, beta={m.beta:g}, {m.flow}, {perc}\n"
            f"global {ext.kind}: E* = {ext.energy:.10g}, gap {ext.gap:.2g} ({len(ext.masses)} atoms)")


def plot_extremum(ext: Extremum, path: str | Path, *, end=None, title: str = "") -> Path | None:
    """Draw the figure (module docstring) to ``path``; None for d > 3."""
    d = ext.model.d
    if d not in (2, 3):
        return None
    plt = _plt()
    path = Path(path)
    if d == 2:
        fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        th = np.linspace(-np.pi, np.pi, 4001)
        if len(ext.masses):                      # the touches at the atoms, exactly
            th = np.sort(np.concatenate([th, np.arctan2(ext.positions[:, 1], ext.positions[:, 0])]))
        f, label = landscape_values(ext, np.stack([np.cos(th), np.sin(th)], axis=1))
        ax.semilogy(th, np.maximum(f, FLOOR), color="k", lw=1.2)
        ax.set_ylim(FLOOR / 2, None)
        ax.set_ylabel(label, fontsize=LABEL_SIZE)
        ang = np.arctan2(ext.positions[:, 1], ext.positions[:, 0]) if len(ext.masses) else np.zeros(0)
        for a in ang:
            ax.axvline(a, color="tab:blue", lw=0.6, alpha=0.5)
        if len(ext.masses):
            bx.vlines(ang, 0, ext.masses, color="tab:blue", lw=2, label=f"global {ext.kind} ({len(ang)} atoms)")
            bx.plot(ang, ext.masses, "o", color="tab:blue")
        elif ext.continuous is not None:
            bx.axhline(ext.continuous.mass / (2 * np.pi), color="tab:blue", lw=2, label="uniform (mass per rad)")
        if end is not None:
            ea = np.arctan2(end.positions[:, 1], end.positions[:, 0])
            bx.vlines(ea + 0.01, 0, end.masses, color="tab:red", lw=1, ls=":")
            bx.plot(ea + 0.01, end.masses, "o", mfc="none", color="tab:red",
                    label=f"flow's certified end ({len(ea)} atoms)")
        bx.set_xlabel("angle (rad)", fontsize=LABEL_SIZE)
        bx.set_ylabel("mass", fontsize=LABEL_SIZE)
        bx.set_xlim(-np.pi, np.pi)
        bx.legend(fontsize=LABEL_SIZE - 1, loc="best")
        ax.set_title(_title(ext, title), fontsize=LABEL_SIZE)
    else:
        fig, ax = plt.subplots(figsize=(10, 5.5))
        lon = np.linspace(-np.pi, np.pi, 361)
        lat = np.linspace(-np.pi / 2, np.pi / 2, 181)
        LO, LA = np.meshgrid(lon, lat)
        pts = np.stack([np.cos(LA) * np.cos(LO), np.cos(LA) * np.sin(LO), np.sin(LA)], axis=-1).reshape(-1, 3)
        f, label = landscape_values(ext, pts)
        from matplotlib.colors import LogNorm
        f = np.maximum(f, FLOOR)
        im = ax.pcolormesh(np.degrees(lon), np.degrees(lat), f.reshape(LA.shape), shading="auto", cmap="viridis",
                           norm=LogNorm(vmin=max(float(f.min()), 1e-8), vmax=max(float(f.max()), 1e-7)))
        fig.colorbar(im, ax=ax, label=label)

        def lonlat(x):
            return np.degrees(np.arctan2(x[:, 1], x[:, 0])), np.degrees(np.arcsin(np.clip(x[:, 2], -1, 1)))

        if len(ext.masses):
            lo_, la_ = lonlat(ext.positions)
            ax.scatter(lo_, la_, s=600 * ext.masses, color="white", edgecolor="k",
                       label=f"global {ext.kind} ({len(ext.masses)} atoms, area ~ mass)")
        if end is not None:
            lo_, la_ = lonlat(end.positions)
            ax.scatter(lo_, la_, s=600 * end.masses, facecolor="none", edgecolor="tab:red", lw=1.5,
                       label=f"flow's certified end ({len(end.masses)} atoms)")
        ax.set_xlabel("longitude (deg)", fontsize=LABEL_SIZE)
        ax.set_ylabel("latitude (deg)", fontsize=LABEL_SIZE)
        ax.set_xlim(-180, 180)
        ax.set_ylim(-90, 90)
        ax.set_aspect("equal")
        if len(ext.masses) or end is not None:
            ax.legend(fontsize=LABEL_SIZE - 1, loc="lower right")
        ax.set_title(_title(ext, title), fontsize=LABEL_SIZE)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
