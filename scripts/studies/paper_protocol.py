#!/usr/bin/env python
"""The main paper's particle protocol on the circle (the main paper §4; The model §5), end to end, with its figures.

Setups (d = 2, USA with gamma = 1 and the kernel exp(beta(<x,y> - 1)), no noise):

    S1    ascent,  ReLU perceptron
    S1-0  ascent,  no perceptron (pure self-attention)
    S2    descent, ReLU perceptron
    S3    descent, GeLU perceptron

Protocol (the conventions of scripts/studies/reference_experiments.py): N = 1000 particles i.i.d. uniform on the
circle (particle seed 42), perceptron ``Perceptron.random(2, 2, activation, 1.0, seed=111)`` (units = d,
a_k uniform on the circle, c_k standard normal; the same weights for every beta and for S1/S2/S3 -- only
the activation differs), explicit Euler with dt = 0.1, one snapshot every 10 steps, stopping rule
``{"window": 5, "drift_tol": 5e-4, "scale": 0.5, "rule": "paper"}``: the cluster count by the released
code's own rule (``solvers.atoms.clusters(..., rule="paper")``: greedy arcs on S^1 at radius
min(0.5 / sqrt(beta), pi / (2 d)) = min(0.5 / sqrt(beta), pi / 4)) unchanged over 5 snapshots, no cluster
wider than the radius, and max_i |v(x_i)| <= 5e-4; at most 200000 steps. beta runs over The model §5's list
{0.01, 0.05, 0.1, 0.5, 1, 3, 5, 7, 10, 15, 25, 35, 50}.

Outputs (in --out, default runs/paper_protocol/):

- ``clusters_vs_sqrt_beta.png``: cluster count at the stop against sqrt(beta), one marker per setup, with
  the least-squares line count = a + b sqrt(beta) over beta >= --fit-min-beta (default 1: below
  beta = (2 d scale / pi)^2 = 0.405 the linkage radius is capped at pi/4 and does not scale), and, as a
  reference, the fastest-growing Fourier mode k* = argmax_k k^2 ive(k, beta) / beta of the linearisation
  around the uniform state (The model §3.2; it predicts the first metastable cluster count of S1-0).
  The left panel counts the final states with single linkage (the library's default rule), the right
  one with the released code's rule, which the stopping rule uses (arcs of diameter <= the radius, so a
  spread-out continuum is cut into pieces that linkage keeps whole).
- ``cluster_masses.png``: every cluster mass against sqrt(beta), per setup (largest and smallest joined);
  for the ReLU setups the clusters lying in the dead zone (every ReLU unit inactive, <a_k, x> + b_k <= 0
  for all k: the perceptron drift vanishes there) are marked, with the total particle mass in the dead
  zone at the stop ("frozen mass"); for the descent setups the Theorem 3.5 bound B(beta) (below).
- ``final_states.png``: histograms of the final angles for a few beta, dead zone shaded.
- ``summary.json`` (records, fits, settings) and the printed table: setup, beta, sqrt(beta), stop reason,
  t_stop, steps, clusters (all; and with mass >= 0.01), masses, dead-zone ("frozen") mass.
- optionally (``--pde-betas``, default 1,5,25; ``--no-pde`` to skip; off in --quick): the PDE from the
  uniform density for S1, S2, S3 with its default options — the spectral solver, then the Lagrangian
  continuation (docs/numerics.md) — to its terminal state (stationary, or t = 2000): its
  atoms (node groups) with masses ± the error estimate of the rerun at twice the nodes, and its diffuse
  mass, next to the particle clusters at convergence: terminal states against terminal states, and for
  each PDE atom the particle mass within 0.05 rad of it (``solvers.comparison.terminal_atoms``). S1-0 is
  skipped: the uniform density is an exact stationary state of pure attention (nothing breaks the symmetry).

Cost: the full protocol (52 particle runs, 9 PDE runs) takes one to two minutes on 2 cores with
2 workers; --quick under 10 s. Results: docs/studies.md.

Theorem 3.5 (anti-concentration of cluster masses in descent). Its formulas are lost in the paper's text
extraction (its §3.2: (3.1)-(3.3) came out as empty placeholders); the bound is taken from
the paper's released code (antonioalvarezl/2026-MLP-Attention-Energy, the heaviest-cluster figure:
``theoretical_heaviest_mass_bound`` and ``compute_c_theta``), re-implemented in :func:`theorem_3_5_bound`:

    m_heaviest <= B(beta) = (4 + 2 e^{3/2} C_theta e^{-beta}) / (4 + (3/4) e^{11/8}),
    C_theta = sum_k |c_k| (Lip(sigma) |a_k|^2 + (|sigma(0)| + Lip(sigma) |a_k|) |a_k|),

which tends to 16 / (16 + 3 e^{11/8}) = 0.5742 as beta grows (the paper's "numerical constant").
Lip(sigma) = 1 for ReLU; for GeLU the exact sup|sigma'| = Phi(sqrt 2) + sqrt 2 phi(sqrt 2) = 1.1289 (the
released code uses the approximation 1.085; the exact constant gives the slightly weaker, valid bound).
It applies to the descent setups S2 and S3 at "sufficiently large" beta; the mass figure draws B where it
is below 1 and the table reports the heaviest cluster (single linkage and greedy) against it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402

# the reference protocol's seeds, shared with reference_experiments.py (this directory)
from reference_experiments import PARTICLE_SEED, PERCEPTRON_SEED  # noqa: E402
D = 2
DT = 0.1
STOP = {"window": 5, "drift_tol": 5e-4, "scale": 0.5, "rule": "paper"}
MAX_STEPS = 200_000
BETAS = [0.01, 0.05, 0.1, 0.5, 1.0, 3.0, 5.0, 7.0, 10.0, 15.0, 25.0, 35.0, 50.0]
QUICK_BETAS = [0.01, 1.0, 5.0]
QUICK_N = 200
PDE_BETAS = [1.0, 5.0, 25.0]
HEAVY = 0.01            # "heavy" clusters / atoms: mass >= 0.01 (as in `attnpde sweep`)

#: name -> (flow, activation or None, marker, colour)
SETUPS = {
    "S1": ("ascent", "relu", "o", "tab:blue"),
    "S1-0": ("ascent", None, "s", "tab:gray"),
    "S2": ("descent", "relu", "v", "tab:red"),
    "S3": ("descent", "gelu", "D", "tab:green"),
}

THEOREM_3_5 = ("Theorem 3.5 (anti-concentration, descent): heaviest cluster mass <= B(beta) = "
               "(4 + 2 e^{3/2} C_theta e^{-beta}) / (4 + (3/4) e^{11/8}), C_theta = sum_k |c_k| (Lip |a_k|^2 + "
               "(|sigma(0)| + Lip |a_k|) |a_k|) -> 16 / (16 + 3 e^{11/8}) = 0.5742 for large beta; formula from the "
               "paper's released code (the seed's text extraction lost it); applies to descent (S2, S3).")
#: sup |sigma'| of the activations the protocol uses (GeLU: sigma' = Phi + z phi, extreme at z = +-sqrt 2)
LIPSCHITZ = {"relu": 1.0, "gelu": 0.5 * (1.0 + math.erf(1.0)) + math.exp(-1.0) / math.sqrt(math.pi)}
SIGMA_AT_0 = {"relu": 0.0, "gelu": 0.0}


def theorem_3_5_constant(perceptron) -> float:
    """C_theta = sum_k |c_k| (Lip |a_k|^2 + (|sigma(0)| + Lip |a_k|) |a_k|) of Theorem 3.5."""
    lip, s0 = LIPSCHITZ[perceptron.activation], SIGMA_AT_0[perceptron.activation]
    na = np.linalg.norm(perceptron.a, axis=1)
    return float(np.sum(np.abs(perceptron.c) * (lip * na ** 2 + (s0 + lip * na) * na)))


def theorem_3_5_bound(beta: float, perceptron) -> float:
    """B(beta) = (4 + 2 e^{3/2} C_theta e^{-beta}) / (4 + (3/4) e^{11/8}): the heaviest cluster mass bound
    of Theorem 3.5 in descent (values >= 1 say nothing)."""
    c = theorem_3_5_constant(perceptron)
    return (4.0 + 2.0 * math.exp(1.5) * c * math.exp(-beta)) / (4.0 + 0.75 * math.exp(11.0 / 8.0))


THEOREM_3_5_LIMIT = 16.0 / (16.0 + 3.0 * math.exp(11.0 / 8.0))


def perceptron_for(setup: str):
    from solvers import Perceptron
    act = SETUPS[setup][1]
    return None if act is None else Perceptron.random(D, D, act, 1.0, seed=PERCEPTRON_SEED)


def model_for(setup: str, beta: float):
    from solvers import Model
    return Model(D, beta, SETUPS[setup][0], perceptron=perceptron_for(setup))


def dead_zone(perceptron, x: np.ndarray) -> np.ndarray | None:
    """True where every ReLU unit is inactive (<a_k, x> + b_k <= 0 for all k); None unless ReLU."""
    if perceptron is None or perceptron.activation != "relu":
        return None
    return np.all(x @ perceptron.a.T + perceptron.b <= 0.0, axis=1)


def _angles(x: np.ndarray) -> np.ndarray:
    return np.arctan2(x[:, 1], x[:, 0])


# --- one particle run --------------------------------------------------------------------------------
def run_particles(setup: str, beta: float, n: int = 1000, max_steps: int = MAX_STEPS) -> dict:
    """One run of the protocol; returns its record (plain JSON values, final angles included)."""
    from solvers import simulate_particles
    from solvers.atoms import arc_extent, clusters as cluster_points
    from solvers.particles import cluster_radius

    model = model_for(setup, beta)
    t0 = time.perf_counter()
    r = simulate_particles(model, n=n, init="random", seed=PARTICLE_SEED, integrator="euler", dt=DT,
                           stop=dict(STOP), max_steps=max_steps)
    wall = time.perf_counter() - t0
    x0, x = r.x[0], r.x[-1]
    radius = cluster_radius(beta, D, STOP["scale"])
    centres, masses, labels = cluster_points(x, r.w, radius, "linkage")
    theta = _angles(x)
    dead = dead_zone(model.perceptron, x)
    dead0 = dead_zone(model.perceptron, x0)
    clusters = []
    for k in range(len(masses)):
        member = labels == k
        rec = {"mass": float(masses[k]), "centre_deg": float(np.degrees(np.arctan2(centres[k, 1], centres[k, 0]))),
               "extent_deg": float(np.degrees(arc_extent(theta[member])))}
        if dead is not None:
            rec["dead_fraction"] = float(np.sum(r.w[member & dead]) / masses[k])
        clusters.append(rec)
    _, greedy = r.clusters(-1, STOP["scale"], rule="paper")
    out = {
        "setup": setup, "flow": model.flow, "activation": None if model.perceptron is None else model.perceptron.activation,
        "beta": float(beta), "sqrt_beta": math.sqrt(beta), "n": int(n), "radius": radius,
        "stop_reason": r.stop_reason, "t_stop": float(r.t_stop), "steps": int(r.nsteps),
        "clusters": int(len(masses)), "heavy_clusters": int(np.sum(masses >= HEAVY)),
        "singletons": int(np.sum(np.isclose(masses, 1.0 / n))),
        "clusters_greedy": int(len(greedy)), "masses_greedy": [float(m) for m in greedy],
        "masses": [float(m) for m in masses], "cluster_details": clusters,
        "max_drift": float(r.max_drift[-1]), "energy": [float(r.energy[0]), float(r.energy[-1])],
        "max_step_stiffness": float(np.nanmax(r.step_stiffness)) if np.any(np.isfinite(r.step_stiffness)) else None,
        "beyond_stability": r.beyond_stability,
        "sums": r.sum_method, "wall": wall, "final_theta": [float(v) for v in theta],
        "frozen_mass": None, "frozen_mass_initial": None, "frozen_clusters_mass": None,
    }
    if dead is not None:
        out["frozen_mass"] = float(np.sum(r.w[dead]))
        out["frozen_mass_initial"] = float(np.sum(r.w[dead0]))
        out["frozen_clusters_mass"] = float(sum(c["mass"] for c in clusters if c["dead_fraction"] >= 0.5))
        out["frozen_clusters"] = int(sum(c["dead_fraction"] >= 0.5 for c in clusters))
    out["bound_3_5"] = None
    if model.flow == "descent" and model.perceptron is not None:
        out["bound_3_5"] = theorem_3_5_bound(beta, model.perceptron)
        out["bound_3_5_holds"] = bool(max(masses) <= out["bound_3_5"])
        out["bound_3_5_holds_greedy"] = bool(max(greedy) <= out["bound_3_5"])
    return out


def near_pde_atoms(pde: dict, rec: dict) -> list[float]:
    """Particle mass of a protocol record within 0.05 rad of each PDE atom of mass >= 0.01."""
    from solvers.atoms import Atoms
    from solvers.comparison import terminal_atoms

    th = np.asarray(rec["final_theta"])
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    atoms = Atoms(np.asarray(pde["positions"]).reshape(-1, 2), np.asarray(pde["masses"]))
    return terminal_atoms(atoms, x, np.full(len(th), 1.0 / len(th)), rec["radius"], cap=0.05,
                          min_mass=HEAVY)["cap_masses"]


# --- one PDE run -------------------------------------------------------------------------------------
def run_pde(setup: str, beta: float, t_final: float = 2000.0) -> dict:
    from solvers import solve_pde

    model = model_for(setup, beta)
    t0 = time.perf_counter()
    res = solve_pde(model, t_final=t_final, degree=128, save_every=t_final / 20)
    wall = time.perf_counter() - t0
    atoms = res.atoms()
    pos, masses = atoms.positions, atoms.masses
    errors = getattr(atoms, "mass_errors", None)
    return {"setup": setup, "beta": float(beta), "stop_reason": res.stop_reason, "t_stop": float(res.t_stop),
            "message": res.message, "t_handoff": res.t_handoff, "atoms": int(len(masses)),
            "heavy_atoms": int(np.sum(masses >= HEAVY)), "masses": [float(m) for m in masses],
            "mass_errors": None if errors is None else [float(e) for e in errors],
            "diffuse": float(getattr(atoms, "diffuse", float("nan"))),
            "positions": pos.tolist(), "positions_deg": [float(v) for v in np.degrees(_angles(pos))] if len(masses) else [],
            "wall": wall}


def _job(kind: str, setup: str, beta: float, n: int, max_steps: int) -> dict:
    # one thread per task: solvers.app.executor.run_single_threaded runs every task
    if kind == "particles":
        return run_particles(setup, beta, n=n, max_steps=max_steps)
    return run_pde(setup, beta)


# --- analysis ----------------------------------------------------------------------------------------
def fastest_mode(beta: float, kmax: int = 400) -> int:
    """k* = argmax_k k^2 ive(k, beta) / beta (USA, d = 2, The model §3.2); 1 in the beta -> 0 limit."""
    from scipy.special import ive
    if beta <= 0:
        return 1
    k = np.arange(1, kmax + 1)
    return int(k[np.argmax(k ** 2 * ive(k, beta))])


def fit_counts(records: list[dict], key: str, min_beta: float) -> dict:
    """Least squares count = a + b sqrt(beta) over beta >= min_beta."""
    rows = [r for r in records if r["beta"] >= min_beta]
    if len(rows) < 2:
        return {"n_points": len(rows)}
    x = np.array([r["sqrt_beta"] for r in rows])
    y = np.array([r[key] for r in rows], dtype=float)
    A = np.vstack([np.ones_like(x), x]).T
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    yhat = a + b * x
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - yhat) ** 2)) / ss if ss > 0 else float("nan")
    return {"intercept": float(a), "slope": float(b), "r2": r2, "n_points": len(rows),
            "beta_range": [float(min(r["beta"] for r in rows)), float(max(r["beta"] for r in rows))]}


# --- figures -----------------------------------------------------------------------------------------
def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_counts(records, fits, setups, path: Path, min_beta: float, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    panels = [("clusters", "single linkage (the library's default rule)"),
              ("clusters_greedy", "greedy arcs of diameter <= radius (the released code's rule: the stop's count)")]
    betas = sorted({r["beta"] for r in records})
    for ax, (key, what) in zip(axes, panels):
        for s in setups:
            rows = sorted((r for r in records if r["setup"] == s), key=lambda r: r["beta"])
            if not rows:
                continue
            _, _, mk, col = SETUPS[s]
            sb = np.array([r["sqrt_beta"] for r in rows])
            f = fits.get(s, {}).get(key, {})
            lab = s + ((f": slope {f['slope']:.2f}, intercept {f['intercept']:.2f} "
                        + ("(one count at every beta)" if np.isnan(f["r2"]) else f"(R² {f['r2']:.2f})"))
                       if "slope" in f else "")
            ax.plot(sb, [r[key] for r in rows], mk, color=col, ms=6, label=lab, mfc="none" if s == "S1-0" else col)
            if "slope" in f:
                xs = np.linspace(math.sqrt(f["beta_range"][0]), math.sqrt(f["beta_range"][1]), 50)
                ax.plot(xs, f["intercept"] + f["slope"] * xs, "-", color=col, lw=1, alpha=0.7)
        ax.plot(np.sqrt(betas), [fastest_mode(b) for b in betas], "k:", lw=1,
                label="k* fastest-growing mode (The model §3.2)")
        ax.axvline(math.sqrt(min_beta), color="0.7", lw=0.8, ls="--")
        ax.set_xlabel("sqrt(beta)")
        ax.set_title(f"clusters at the stop: {what}\nfit over beta >= {min_beta:g}", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("clusters")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_masses(records, setups, path: Path, title: str) -> None:
    plt = _plt()
    ncol = min(2, len(setups))
    nrow = math.ceil(len(setups) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 3.8 * nrow), squeeze=False)
    for ax, s in zip(axes.flat, setups):
        rows = sorted((r for r in records if r["setup"] == s), key=lambda r: r["beta"])
        _, _, mk, col = SETUPS[s]
        if not rows:
            ax.set_visible(False)
            continue
        sb = np.array([r["sqrt_beta"] for r in rows])
        relu = rows[0]["frozen_mass"] is not None
        lab_active = lab_dead = True
        for r in rows:
            for c in r["cluster_details"]:
                in_dead = relu and c["dead_fraction"] >= 0.5
                ax.plot(r["sqrt_beta"], c["mass"], "x" if in_dead else mk, ms=5 if in_dead else 4,
                        color="k" if in_dead else col, mfc="none", alpha=0.8,
                        label=("cluster in the dead zone" if in_dead and lab_dead else
                               "cluster" if not in_dead and lab_active else None))
                if in_dead:
                    lab_dead = False
                else:
                    lab_active = False
        ax.plot(sb, [max(r["masses"]) for r in rows], "-", color=col, lw=1, label="largest")
        ax.plot(sb, [min(r["masses"]) for r in rows], "--", color=col, lw=1, label="smallest")
        if relu:
            ax.plot(sb, [r["frozen_mass"] or np.nan for r in rows], "-", color="k", lw=1.5,
                    label="mass in the dead zone (all ReLU units off)")
        if rows[0]["bound_3_5"] is not None:
            b = np.array([r["bound_3_5"] for r in rows])
            ax.plot(sb, np.where(b < 1.0, b, np.nan), "^--", color="tab:orange", ms=3, lw=1,
                    label="Theorem 3.5 bound B(beta) (where < 1)")
            ax.plot(sb, [max(r["masses_greedy"]) for r in rows], ":", color=col, lw=1.5,
                    label="largest greedy cluster (diameter <= radius)")
            ax.axhline(THEOREM_3_5_LIMIT, color="k", ls=":", lw=1, label="16 / (16 + 3 e^{11/8})")
        ax.set_yscale("log")
        ax.set_ylim(0.5 / max(r["n"] for r in rows), 1.5)
        ax.set_title(f"{s}: {SETUPS[s][0]}, {SETUPS[s][1] or 'no perceptron'}", fontsize=9)
        ax.set_xlabel("sqrt(beta)")
        ax.set_ylabel("cluster mass")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, loc="lower left")
    for ax in list(axes.flat)[len(setups):]:
        ax.set_visible(False)
    fig.suptitle(title + "\ndescent: heaviest cluster against the Theorem 3.5 bound (formula from the paper's "
                 "released code)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_final_states(records, setups, path: Path) -> None:
    plt = _plt()
    betas = sorted({r["beta"] for r in records})
    show = [b for b in (1.0, 10.0, 50.0) if b in betas]
    if len(show) < 3:
        show = betas if len(betas) <= 3 else [betas[0], betas[len(betas) // 2], betas[-1]]
    fig, axes = plt.subplots(len(show), len(setups), figsize=(3.2 * len(setups), 2.2 * len(show)), squeeze=False)
    for j, s in enumerate(setups):
        p = perceptron_for(s)
        for i, b in enumerate(show):
            ax = axes[i, j]
            r = next((r for r in records if r["setup"] == s and r["beta"] == b), None)
            if r is None:
                ax.set_visible(False)
                continue
            th = np.degrees(np.array(r["final_theta"]))
            if p is not None and p.activation == "relu":
                grid = np.linspace(-180, 180, 721)
                xs = np.stack([np.cos(np.radians(grid)), np.sin(np.radians(grid))], 1)
                ax.fill_between(grid, 0, 1, where=dead_zone(p, xs), color="0.85", transform=ax.get_xaxis_transform(),
                                label="dead zone")
            ax.hist(th, bins=180, range=(-180, 180), weights=np.full(th.size, 1.0 / th.size), color=SETUPS[s][3])
            ax.set_yscale("log")
            ax.set_ylim(0.5 / th.size, 1.5)
            ax.set_xlim(-180, 180)
            ax.set_title(f"{s} beta={b:g}: {r['clusters']} clusters, t={r['t_stop']:g}", fontsize=7)
            ax.tick_params(labelsize=6)
            if i == len(show) - 1:
                ax.set_xlabel("angle (deg)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main --------------------------------------------------------------------------------------------
def _fmt_masses(m: list[float], k: int = 6) -> str:
    return ", ".join(f"{v:.3f}" for v in m[:k]) + (f" ... (+{len(m) - k})" if len(m) > k else "")


def print_table(records: list[dict], pde: list[dict]) -> None:
    print("clus: single-linkage clusters at the stop; >=.01: those of mass >= 0.01; grdy: greedy arcs of diameter "
          "<= radius (the paper's released code's rule); dead: particle mass in the ReLU dead zone "
          "(every unit inactive) at the stop -- the frozen mass in descent (S2)")
    hdr = (f"{'setup':5s} {'beta':>6s} {'sqrtb':>6s} {'stop':>9s} {'t_stop':>8s} {'steps':>7s} {'clus':>4s} "
           f"{'>=.01':>5s} {'grdy':>4s} {'dead':>6s} {'wall':>6s}  masses (heaviest first)")
    print(hdr)
    print("-" * len(hdr))
    for r in records:
        fm = "-" if r["frozen_mass"] is None else f"{r['frozen_mass']:.3f}"
        print(f"{r['setup']:5s} {r['beta']:6g} {r['sqrt_beta']:6.3f} {r['stop_reason']:>9s} {r['t_stop']:8g} "
              f"{r['steps']:7d} {r['clusters']:4d} {r['heavy_clusters']:5d} {r['clusters_greedy']:4d} {fm:>6s} {r['wall']:6.1f}  "
              f"{_fmt_masses(r['masses'])}", flush=True)
    bounded = [r for r in records if r.get("bound_3_5") is not None]
    if bounded:
        print(f"\nTheorem 3.5 (descent): heaviest cluster mass against B(beta) (-> {THEOREM_3_5_LIMIT:.4f}; "
              "B >= 1 says nothing):")
        for r in bounded:
            b = r["bound_3_5"]
            verdict = ("vacuous" if b >= 1 else
                       "holds" if r["bound_3_5_holds"] and r["bound_3_5_holds_greedy"] else
                       "holds (greedy only)" if r["bound_3_5_holds_greedy"] else "VIOLATED")
            print(f"  {r['setup']:5s} beta={r['beta']:<5g} heaviest {max(r['masses']):.3f} (greedy "
                  f"{max(r['masses_greedy']):.3f})  B = {b:.4g}  {verdict}")
    if pde:
        print("\nPDE from uniform to its terminal state (Lagrangian continuation; atoms: node groups, mass ± "
              "the estimate at twice the nodes), next to the particle clusters at convergence and the particle "
              "mass within 0.05 rad of each PDE atom of mass >= 0.01:")
        for p in pde:
            r = next((r for r in records if r["setup"] == p["setup"] and r["beta"] == p["beta"]), None)
            err = p["mass_errors"] or [float("nan")] * len(p["masses"])
            atoms = ", ".join(f"{m:.4f}±{e:.1e}" for m, e in zip(p["masses"], err) if m >= HEAVY) or "none"
            line = (f"  {p['setup']:5s} beta={p['beta']:<4g} PDE {p['stop_reason']} at t={p['t_stop']:.4g} "
                    f"({p['wall']:.1f} s): atoms {atoms}; diffuse {p['diffuse']:.4f}")
            if r is not None:
                line += (f" | particles: {r['clusters']} clusters ({r['heavy_clusters']} >= 0.01) at t={r['t_stop']:g},"
                         f" masses {_fmt_masses(r['masses'], 4)}; near the PDE atoms "
                         + ", ".join(f"{m:.4f}" for m in r.get("near_pde_atoms", [])))
            print(line, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "paper_protocol", help="output directory")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke test: beta {QUICK_BETAS}, N = {QUICK_N}, no PDE (unless given explicitly)")
    ap.add_argument("--betas", type=str, help="comma-separated betas (default The model §5's 13 values)")
    ap.add_argument("--n", type=int, help="particles (default 1000; --quick: 200)")
    ap.add_argument("--setups", type=str, default=",".join(SETUPS), help="comma-separated, from S1,S1-0,S2,S3")
    ap.add_argument("--workers", type=int, default=2, help="local processes (default 2)")
    ap.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the jobs on a running Dask cluster (tcp://HOST:PORT or a scheduler file) instead of "
                         "local processes; the workers must import this script's directory (docs/cluster.md)")
    ap.add_argument("--max-steps", type=int, default=MAX_STEPS)
    ap.add_argument("--fit-min-beta", type=float, default=1.0,
                    help="fit clusters = a + b sqrt(beta) over beta >= this (default 1)")
    ap.add_argument("--pde-betas", type=str, help=f"betas of the PDE runs (default {PDE_BETAS}; none in --quick)")
    ap.add_argument("--no-pde", action="store_true", help="skip the PDE runs")
    args = ap.parse_args(argv)
    from solvers.app.executor import SchedulerError, open_pool
    if args.workers < 1:
        ap.error("--workers must be >= 1")

    betas = [float(b) for b in args.betas.split(",")] if args.betas else (QUICK_BETAS if args.quick else BETAS)
    n = args.n or (QUICK_N if args.quick else 1000)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    bad = [s for s in setups if s not in SETUPS]
    if bad or not setups:
        ap.error(f"--setups: unknown {bad}; choose from {', '.join(SETUPS)}")
    if args.no_pde:
        pde_betas = []
    elif args.pde_betas is not None:
        pde_betas = [float(b) for b in args.pde_betas.split(",") if b.strip()]
    else:
        pde_betas = [] if args.quick else [b for b in PDE_BETAS]
    pde_setups = [s for s in setups if SETUPS[s][1] is not None]
    try:
        pool = open_pool(args.workers, args.scheduler)
    except SchedulerError as e:
        ap.error(str(e))
    args.out.mkdir(parents=True, exist_ok=True)

    print(f"particle seed {PARTICLE_SEED}, perceptron Perceptron.random(2, 2, act, 1.0, seed={PERCEPTRON_SEED}); "
          f"N = {n}, explicit Euler dt = {DT}, snapshot every 10 steps, stop {STOP}, max {args.max_steps} steps")
    for s in setups:
        p = perceptron_for(s)
        desc = "no perceptron" if p is None else (f"{p.activation}: a angles (deg) "
                                                  f"{np.round(np.degrees(_angles(p.a)), 2).tolist()}, c {np.round(p.c, 4).tolist()}")
        print(f"  {s}: {SETUPS[s][0]}, {desc}")
    print(f"betas {betas}; setups {setups}; PDE betas {pde_betas or 'none'}; {args.workers} workers", flush=True)
    print(THEOREM_3_5, flush=True)

    jobs = [("particles", s, b) for s in setups for b in betas] + [("pde", s, b) for s in pde_setups for b in pde_betas]
    # largest beta first (they take longest), so the two workers finish together
    jobs.sort(key=lambda j: (-j[2], j[0] != "pde"))
    t0 = time.perf_counter()
    records, pde = [], []
    with pool:
        print(f"jobs on {pool.description}", flush=True)
        futs = [pool.submit(_job, kind, s, b, n, args.max_steps) for kind, s, b in jobs]
        for i, (j, r) in enumerate(pool.results(futs), 1):
            kind, s, b = jobs[j]
            (records if kind == "particles" else pde).append(r)
            what = (f"{r['stop_reason']} t={r['t_stop']:g}, {r['clusters']} clusters" if kind == "particles"
                    else f"{r['stop_reason']} t={r['t_stop']:.4g}, {r['heavy_atoms']} atoms >= 0.01")
            print(f"[{i}/{len(jobs)} {time.perf_counter() - t0:7.1f} s] {kind:9s} {s:5s} beta={b:<5g} {what} "
                  f"({r['wall']:.1f} s)", flush=True)
    wall = time.perf_counter() - t0
    order = {s: i for i, s in enumerate(SETUPS)}
    records.sort(key=lambda r: (order[r["setup"]], r["beta"]))
    pde.sort(key=lambda r: (order[r["setup"]], r["beta"]))
    for p in pde:
        r = next((r for r in records if r["setup"] == p["setup"] and r["beta"] == p["beta"]), None)
        if r is not None:
            r["near_pde_atoms"] = near_pde_atoms(p, r)

    fits = {s: {key: fit_counts([r for r in records if r["setup"] == s], key, args.fit_min_beta)
                for key in ("clusters", "heavy_clusters", "clusters_greedy")} for s in setups}
    print()
    print_table(records, pde)
    print(f"\nfits clusters = a + b sqrt(beta) over beta >= {args.fit_min_beta:g}:")
    for s in setups:
        for key in ("clusters", "heavy_clusters", "clusters_greedy"):
            f = fits[s][key]
            if "slope" in f:
                r2 = "- (one count at every beta)" if np.isnan(f["r2"]) else f"{f['r2']:.3f}"
                print(f"  {s:5s} {key:15s} slope {f['slope']:6.3f}  intercept {f['intercept']:6.3f}  R^2 {r2}"
                      f"  ({f['n_points']} points, beta {f['beta_range'][0]:g}..{f['beta_range'][1]:g})")
            else:
                print(f"  {s:5s} {key:15s} too few points")
    print("  k* (fastest-growing mode): " + ", ".join(f"beta={b:g}: {fastest_mode(b)}" for b in betas))

    title = (f"circle, N={n}, Euler dt={DT}, stop window 5 / drift 5e-4 / scale 0.5; seeds 42 / 111")
    plot_counts(records, fits, setups, args.out / "clusters_vs_sqrt_beta.png", args.fit_min_beta, title)
    plot_masses(records, setups, args.out / "cluster_masses.png", title)
    plot_final_states(records, setups, args.out / "final_states.png")
    summary = {
        "settings": {"d": D, "n": n, "dt": DT, "stop": STOP, "max_steps": args.max_steps, "particle_seed": PARTICLE_SEED,
                     "perceptron": f"Perceptron.random(2, 2, activation, 1.0, seed={PERCEPTRON_SEED})",
                     "betas": betas, "setups": {s: SETUPS[s][:2] for s in setups}, "fit_min_beta": args.fit_min_beta,
                     "heavy_mass": HEAVY, "workers": args.workers},
        "theorem_3_5": THEOREM_3_5,
        "wall_time": wall,
        "fits": fits,
        "fastest_mode": {str(b): fastest_mode(b) for b in betas},
        "records": [{k: v for k, v in r.items() if k != "final_theta"} for r in records],
        "pde": pde,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nwall time {wall:.1f} s ({len(jobs)} runs, {args.workers} workers); wrote {args.out}/summary.json, "
          f"clusters_vs_sqrt_beta.png, cluster_masses.png, final_states.png", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
