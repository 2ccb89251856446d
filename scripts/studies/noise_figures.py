#!/usr/bin/env python3
"""The figures and numbers of docs/noise.md (solvers.stationary): the S^1 branches of modes 1..4 at beta = 1 and
beta = 10 (docs/branches_s1.png), the switch of kind located by bisection on computed branches against the
Bessel-ratio root on S^1 and S^2, the subcritical fold and transition at beta = 3 on both, and the leading
eigenvalues of the k-cluster states at larger beta (their metastability).

    .venv/bin/python scripts/studies/noise_figures.py [--out docs] [--skip-figure]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import iv

from solvers import Model
from solvers.branches import branch_from_uniform


def bessel_root(d: int) -> float:
    return brentq(lambda b: iv(d / 2 + 1, b) / iv(d / 2, b) - 1 / d, 0.1, 20.0, xtol=1e-15)


def kind_switch(d: int, degree: int, lo: float, hi: float, tol: float = 1e-7) -> tuple[float, int]:
    """The beta where the mode-1 branch's kind changes, by bisection on computed branches."""
    kind = lambda beta: branch_from_uniform(Model(d, beta, "ascent"), 1, degree, max_points=10).kind  # noqa: E731
    k_lo, n = kind(lo), 0
    assert k_lo == "supercritical" and kind(hi) == "subcritical"
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if kind(mid) == k_lo else (lo, mid)
        n += 1
    return 0.5 * (lo + hi), n


def figure(out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), gridspec_kw={"height_ratios": [3, 2]})
    for col, beta in enumerate((1.0, 10.0)):
        ax, axf = axes[0, col], axes[1, col]
        for k in (1, 2, 3, 4):
            b = branch_from_uniform(Model(2, beta, "ascent"), k, 128, max_points=150)
            color = f"C{k - 1}"
            keep = b.side >= 0                      # one side of each pitchfork (the other is its mirror image)
            nu, amp, dF, st = b.noise[keep], b.amplitude[keep], (b.free_energy - b.free_energy_uniform)[keep], b.stable[keep]
            for a, y in ((ax, amp), (axf, dF)):
                start = 0
                for i in range(1, len(nu) + 1):
                    if i == len(nu) or st[i] != st[start]:
                        a.plot(nu[start:i + 1], y[start:i + 1], "-" if st[start] else "--", color=color,
                               lw=1.6 if st[start] else 1.1)
                        start = i
            ax.plot([b.threshold], [0], "o", color=color, ms=4, label=f"k = {k}: {b.kind}, nu_k = {b.threshold:.3g}")
            for f in b.folds:
                if f["amplitude"] > 0:
                    ax.plot([f["nu"]], [f["amplitude"]], "x", color=color, ms=7, mew=1.8)
            if b.transition is not None and b.kind == "subcritical":
                ax.axvline(b.transition, color=color, ls="-.", lw=0.9)
        for a in (ax, axf):
            a.set_xscale("log")
            a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            a.grid(alpha=0.3)
        ax.set_title(f"S^1, USA ascent, beta = {beta:g}: branches of modes 1-4", fontsize=10)
        ax.set_ylabel("|c_k| (amplitude of the mode)")
        axf.set_ylabel("F - F_uniform")
        axf.set_xlabel("noise nu (log scale)")
        ax.plot([], [], "-", color="0.3", label="stable")
        ax.plot([], [], "--", color="0.3", label="unstable")
        ax.legend(fontsize=7, loc="lower left", framealpha=0.9)
    fig.tight_layout()
    path = out / "branches_s1.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs")
    ap.add_argument("--skip-figure", action="store_true")
    args = ap.parse_args()
    for d, degree, lo, hi in ((2, 64, 2.0, 3.0), (3, 32, 1.5, 2.5)):
        t0 = time.perf_counter()
        found, n = kind_switch(d, degree, lo, hi)
        root = bessel_root(d)
        print(f"S^{d - 1}: kind switches at beta = {found:.8f} ({n} bisections of computed branches, degree {degree}, "
              f"{time.perf_counter() - t0:.1f} s); Bessel-ratio root {root:.8f}; difference {found - root:+.2e}")
    for d, degree in ((2, 64), (3, 64)):
        m = Model(d, 3.0, "ascent")
        nu1 = m.energy_multipliers(1)[1]
        b = branch_from_uniform(m, 1, degree, noise_range=(0.5 * nu1, 1.2 * nu1), max_points=150)
        f = b.folds[0]["nu"]
        print(f"S^{d - 1}, beta = 3: {b.kind} (a2 = {b.normal_form:+.6g}); threshold {b.threshold:.10f}, transition "
              f"{b.transition:.10f}, fold {f:.10f}: nu_1 < nu_t < nu_f")
    for beta in (10.0, 30.0):
        m = Model(2, beta, "ascent")
        for k in (2, 3, 4):
            b = branch_from_uniform(m, k, 128, max_points=150)
            # the stable-most state of the branch below its threshold: the k-cluster state
            i = int(np.argmin(np.where((b.side > 0) & (b.noise < 0.8 * b.threshold), b.unstable, 10 ** 9)))
            s = b.state(i, eigenvalues=12)
            pos = s.eigenvalues[s.eigenvalues > 0]
            print(f"S^1 beta = {beta:g}, mode {k}: at nu = {s.noise:.4g} ({s.noise / b.threshold:.2f} nu_k) "
                  f"{s.unstable_directions} unstable direction(s), positive eigenvalues "
                  f"{', '.join(f'{v:.2e}' for v in pos)}; leading stable {s.eigenvalues[len(pos)]:.3g}")
    if not args.skip_figure:
        print(f"figure: {figure(args.out)}")


if __name__ == "__main__":
    main()
