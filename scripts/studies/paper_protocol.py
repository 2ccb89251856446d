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
  spread-out continuum is cut into pieces that linkage keeps whole). Both panels also draw the PDE's
  certified atom count per setup (larger markers P / X / *, hollow where the run was not certified: its
  node groups at the cap); integer ticks.
- ``cluster_masses.png``: every cluster mass against sqrt(beta), per setup (largest and smallest joined);
  for the ReLU setups the clusters lying in the dead zone (every ReLU unit inactive, <a_k, x> + b_k <= 0
  for all k: the perceptron drift vanishes there) are marked, with the total particle mass in the dead
  zone at the stop ("frozen mass"); for the descent setups the Theorem 3.5 bound B(beta) (below). The
  PDE's atom masses with their error bars stand just right of each beta's particle column, and for the
  ReLU setups the PDE's atom mass in the (closed) dead zone.
- ``final_states.png``: the particles' final angles for beta = 1, 10, 50 as mass per 2-degree bin, with
  the PDE's atoms as dashed stems of their mass (the same units, log scale), dead zone shaded.
- ``summary.json`` (records, fits, settings, the PDE records) and the printed table: setup, beta,
  sqrt(beta), stop reason, t_stop, steps, clusters (all; and with mass >= 0.01), masses, dead-zone
  ("frozen") mass; then the PDE's terminal states beside the particles' clusters, also written as the
  Markdown table ``terminal_table.md`` (docs/terminal.md reproduces it).
- the PDE (``--pde-betas``, default all of --betas; ``--pde-setups``, default S1, S2, S3; ``--no-pde`` to
  skip; off in --quick unless given) from the uniform density with ``t_final = inf`` (solvers.terminal: the
  run goes on until its terminal state is certified), degree 128 and the default options — the spectral
  solver, then the Lagrangian continuation with 4096 nodes and its error-estimate rerun at 8192 (docs/numerics.md). Recorded per run: ``status`` ("certified", "not certified: cap reached", or
  "not certified: <stop reason> (<message>)"), the certified ``terminal`` state (``TerminalState.to_dict``:
  atoms, masses, ``mass_errors``, verdict stable / unstable (a saddle) / marginal, growth, eigenvalues, the
  time ``t`` certified, energy), the ``plateaus`` (t_entered, t_certified, energy, growth, part, kick,
  atoms), the atoms' dead-zone flags and mass, wall and CPU time; for each PDE atom of mass >= 0.01 the
  particle mass within 0.05 rad of it (``solvers.comparison.terminal_atoms``) goes into the particle
  record. S1-0 is skipped: the uniform density is an exact stationary state of pure attention (nothing
  breaks the symmetry).
- The cap: ``--pde-max-steps`` (default 0: none; every run goes on to its certified end) bounds the accepted
  steps of each run's continuation and, separately, of its error-estimate rerun. A run stopped by it is
  "not certified: cap reached" with its node groups at that time and no error bars (the package reruns only
  after "stationary" or "t_final"); a certified run whose rerun the cap cut keeps its certified atoms, without
  error bars ("rerun cut by the cap").
- Each certified PDE end is set beside the certified global extremum of the energy (``solvers.extremum``:
  the main paper's Prop. 3.7): the table's energy gap and "global" columns, and the extremum's atoms in
  ``final_states.png``; ``energy_gap.png`` draws E(end) - E* against sqrt(beta) per setup. ``--replot`` writes
  the table and that figure again from an output directory's summary.json. The slow stages and plateaus the flow passed are the table's stages column.

The longest jobs go first (:func:`expected_cost`). --quick (no PDE) takes seconds.

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
#: cap on the accepted steps of a PDE run's continuation (and of its error-estimate rerun); none by default
PDE_MAX_STEPS = 0
HEAVY = 0.01            # "heavy" clusters / atoms: mass >= 0.01 (as in `attnpde sweep`)
#: an atom is in the (closed) ReLU dead zone when every unit's argument <a_k, x> + b_k is at most this
DEAD_TOL = 1e-9

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
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate_particles(model, n=n, init="random", seed=PARTICLE_SEED, integrator="euler", dt=DT,
                           stop=dict(STOP), max_steps=max_steps)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
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
        "sums": r.sum_method, "wall": wall, "cpu": cpu, "final_theta": [float(v) for v in theta],
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
def _dead_atoms(perceptron, positions: np.ndarray) -> list[bool] | None:
    """For each atom: does it lie in the closed dead zone (every ReLU unit's argument <= DEAD_TOL)? None
    unless ReLU. Closed: descent parks atoms on the zone's edge, where the largest argument is 0 to round-off."""
    if perceptron is None or perceptron.activation != "relu" or len(positions) == 0:
        return None
    return [bool(v) for v in np.all(positions @ perceptron.a.T + perceptron.b <= DEAD_TOL, axis=1)]


def run_pde(setup: str, beta: float, t_final: float = math.inf, max_steps: int | None = None) -> dict:
    """The PDE from the uniform density to its certified terminal state (``t_final = inf``; solvers.terminal),
    degree 128 and the package's default options (4096 nodes, the error-estimate rerun at 8192). ``max_steps``
    caps the continuation's accepted steps (and, separately, its rerun's): a run that reaches it is reported
    "not certified: cap reached". Returns a plain-JSON record: the certified atoms (``terminal``: masses ±
    the rerun's errors, verdict, growth, t), the plateaus, and the node groups at the end."""
    from solvers import solve_pde

    model = model_for(setup, beta)
    opts = {} if max_steps is None else {"max_steps": int(max_steps)}
    t0, c0 = time.perf_counter(), time.process_time()
    res = solve_pde(model, t_final=t_final, degree=128, **opts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    T = res.terminal
    groups = res.atoms()                       # the node groups at the end (± the rerun's errors when it got there)
    if T is not None:
        pos, masses, errors = T.positions, T.masses, T.mass_errors
        status = "certified"
    else:
        pos, masses, errors = groups.positions, groups.masses, getattr(groups, "mass_errors", None)
        status = ("not certified: cap reached" if res.stop_reason == "max_steps" else
                  f"not certified: {res.stop_reason} ({res.message})")
    lag = res.lagrangian
    check = None if lag is None else lag.check
    dead = _dead_atoms(model.perceptron, np.asarray(pos))
    return {"setup": setup, "beta": float(beta), "status": status, "certified": T is not None,
            "stop_reason": res.stop_reason, "t_stop": float(res.t_stop), "message": res.message,
            "t_handoff": res.t_handoff, "max_steps": max_steps,
            "node_steps": None if lag is None else lag.node_nsteps,
            "check_steps": None if check is None else check.nsteps,
            "check_stop": None if check is None else check.stop_reason,
            "check_wall": None if check is None else check.wall_time,
            "atoms": int(len(masses)), "heavy_atoms": int(np.sum(masses >= HEAVY)),
            "resolved_atoms": int(len(masses) if errors is None else np.sum(np.asarray(masses) > np.asarray(errors))),
            "masses": [float(m) for m in masses],
            "mass_errors": None if errors is None else [float(e) for e in errors],
            "positions": np.asarray(pos).tolist(),
            "positions_deg": [float(v) for v in np.degrees(_angles(np.asarray(pos)))] if len(masses) else [],
            "dead": dead, "dead_mass": None if dead is None else float(np.sum(np.asarray(masses)[dead])),
            "diffuse": 0.0 if T is not None else float(getattr(groups, "diffuse", float("nan"))),
            "terminal": None if T is None else T.to_dict(),
            "plateaus": [{k: v for k, v in pl.to_dict().items() if k != "direction"} for pl in res.plateaus],
            "slow_stages": [st.to_dict() for st in res.slow_stages],
            "merges": 0 if lag is None else int(len(lag.merges)),
            "extremum": _extremum_record(model),
            "wall": wall, "cpu": cpu}


def _extremum_record(model) -> dict | None:
    """The certified global extremum of the model's energy (solvers.extremum): its atoms (angles in degrees),
    energy and certificate; None for a model it does not cover."""
    from solvers import extremum
    try:
        e = extremum(model)
    except ValueError:
        return None
    return {"kind": e.kind, "energy": float(e.energy), "gap": float(e.gap),
            "masses": [float(m) for m in e.masses], "positions": np.asarray(e.positions).tolist(),
            "positions_deg": [float(v) for v in np.degrees(_angles(np.asarray(e.positions)))] if len(e.masses) else [],
            "continuous": e.continuous is not None}


def expected_cost(job: tuple) -> float:
    """A rough cost (seconds) of a job, to start the longest first so that the workers finish together
    (CPU seconds, docs/terminal.md): S2's PDE grows with beta (its dead-zone crystallisation), S1's at
    beta >= 15 follows slow stages to t ~ 1e12-1e42, the other PDE runs take ~5 s, the particle runs a few
    seconds, more at large beta."""
    kind, setup, beta = job
    if kind == "pde":
        if setup == "S2":
            return 120.0 if beta >= 35 else 60.0 if beta >= 25 else 12.0 if beta >= 3 else 6.0
        return 10.0 if setup == "S1" and beta >= 15 else 5.0
    return 1.0 + beta / 10.0


def _job(kind: str, setup: str, beta: float, n: int, max_steps: int, pde_max_steps: int | None = None) -> dict:
    # one thread per task: solvers.app.executor.run_single_threaded runs every task
    if kind == "particles":
        return run_particles(setup, beta, n=n, max_steps=max_steps)
    return run_pde(setup, beta, max_steps=pde_max_steps)


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


#: the PDE's markers, one per setup (the particles' are in SETUPS)
PDE_MARKERS = {"S1": "P", "S2": "X", "S3": "*"}


def plot_counts(records, fits, setups, path: Path, min_beta: float, title: str, pde=()) -> None:
    plt = _plt()
    from matplotlib.ticker import MaxNLocator
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6))
    panels = [("clusters", "single linkage (the library's default rule)"),
              ("clusters_greedy", "greedy arcs, diameter <= radius (the released code's, the stop's rule)")]
    betas = sorted({r["beta"] for r in records})
    shared = {}          # label -> handle, for the legend under both panels (PDE and k*)
    for ax, (key, what) in zip(axes, panels):
        fit_handles = []
        for s in setups:
            rows = sorted((r for r in records if r["setup"] == s), key=lambda r: r["beta"])
            if not rows:
                continue
            _, _, mk, col = SETUPS[s]
            sb = np.array([r["sqrt_beta"] for r in rows])
            f = fits.get(s, {}).get(key, {})
            lab = s + (" particles" if pde else "") + (
                (f": slope {f['slope']:.2f}, intercept {f['intercept']:.2f} "
                 + ("(one count at every beta)" if np.isnan(f["r2"]) else f"(R² {f['r2']:.2f})"))
                if "slope" in f else "")
            # on top of the PDE's larger markers, which they would hide where the counts agree
            (h,) = ax.plot(sb, [r[key] for r in rows], mk, color=col, ms=6, label=lab, zorder=3,
                           mfc="none" if s == "S1-0" else col)
            fit_handles.append(h)
            if "slope" in f:
                xs = np.linspace(math.sqrt(f["beta_range"][0]), math.sqrt(f["beta_range"][1]), 50)
                ax.plot(xs, f["intercept"] + f["slope"] * xs, "-", color=col, lw=1, alpha=0.7)
        for s in setups:
            rows = sorted((p for p in pde if p["setup"] == s), key=lambda p: p["beta"])
            if not rows:
                continue
            col = SETUPS[s][3]
            sb = np.sqrt([p["beta"] for p in rows])
            cert = np.array([p["certified"] for p in rows])
            n_atoms = np.array([p["atoms"] for p in rows], dtype=float)
            ax.plot(sb, n_atoms, "--", color=col, lw=0.8, alpha=0.6)
            if np.any(cert):
                (h,) = ax.plot(sb[cert], n_atoms[cert], PDE_MARKERS[s], color=col, ms=10, mec="k", mew=0.6)
                shared.setdefault(f"{s} PDE: atoms of the certified terminal state", h)
            if np.any(~cert):
                (h,) = ax.plot(sb[~cert], n_atoms[~cert], PDE_MARKERS[s], color="none", ms=10, mec=col, mew=1.4)
                shared.setdefault(f"{s} PDE not certified: node groups at the cap", h)
        (h,) = ax.plot(np.sqrt(betas), [fastest_mode(b) for b in betas], "k:", lw=1)
        shared.setdefault("k* fastest-growing mode (The model §3.2)", h)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.axvline(math.sqrt(min_beta), color="0.7", lw=0.8, ls="--")
        ax.set_xlabel("sqrt(beta)")
        ax.set_title(f"particles at the stop: {what}; fit over beta >= {min_beta:g}", fontsize=8)
        ax.legend(handles=fit_handles, fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
        ax.set_ylabel("clusters (particles), atoms (PDE)" if pde else "clusters")
    fig.legend(list(shared.values()), list(shared.keys()), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(title + ("\nPDE from uniform to its certified terminal state (t_final = inf), the same in both "
                          "panels" if pde else ""), fontsize=9)
    fig.tight_layout(rect=(0, 0.1 if len(shared) > 3 else 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_masses(records, setups, path: Path, title: str, pde=()) -> None:
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
                    label="particle mass in the dead zone (all ReLU units off)")
        prow = sorted((p for p in pde if p["setup"] == s), key=lambda p: p["beta"])
        errs = [e for p in prow for e in (p["mass_errors"] or [])]
        # the error bars are often far below a marker's size on this log scale: the label says how large
        err_note = f"; error <= {max(errs):.1e}" if errs else ""
        lab_cert = lab_open = True
        for p in prow:
            m = np.asarray(p["masses"])
            e = np.asarray(p["mass_errors"]) if p["mass_errors"] is not None else None
            # beside the particles' column (+0.12 in sqrt(beta)), so that neither hides the other
            x = np.full(len(m), math.sqrt(p["beta"]) + 0.12)
            ax.errorbar(x, m, yerr=e, fmt=PDE_MARKERS.get(s, "P"), ms=5, color="k" if p["certified"] else "0.6",
                        mfc=col if p["certified"] else "none", mew=0.6, elinewidth=1, capsize=2, ls="none",
                        label=(f"PDE atom (certified{err_note})" if p["certified"] and lab_cert else
                               "PDE node group (not certified)" if not p["certified"] and lab_open else None))
            if p["certified"]:
                lab_cert = False
            else:
                lab_open = False
        if relu and prow:
            ax.plot([math.sqrt(p["beta"]) + 0.12 for p in prow], [p["dead_mass"] or np.nan for p in prow], "-.",
                    color="k", lw=1.2, label="PDE atom mass in the dead zone")
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
        ax.set_ylabel("particle cluster / PDE atom mass")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, loc="lower left", ncol=2)
    for ax in list(axes.flat)[len(setups):]:
        ax.set_visible(False)
    fig.suptitle(title + "\ndescent: heaviest cluster against the Theorem 3.5 bound (formula from the paper's "
                 "released code)" + ("; PDE atoms just right of each beta's particle column" if pde else ""),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _n(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else "s")


def plot_final_states(records, setups, path: Path, pde=()) -> None:
    plt = _plt()
    betas = sorted({r["beta"] for r in records})
    show = [b for b in (1.0, 10.0, 50.0) if b in betas]
    if len(show) < 3:
        show = betas if len(betas) <= 3 else [betas[0], betas[len(betas) // 2], betas[-1]]
    fig, axes = plt.subplots(len(show), len(setups), figsize=(3.4 * len(setups), 2.6 * len(show)), squeeze=False)
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
            # particle mass per 2-degree bin, and the PDE's atoms as stems of their mass: the same units
            ax.hist(th, bins=180, range=(-180, 180), weights=np.full(th.size, 1.0 / th.size), color=SETUPS[s][3],
                    histtype="stepfilled", ec=SETUPS[s][3], lw=1.5, label="particles: mass per 2° bin")
            floor = 0.5 / th.size
            q = next((q for q in pde if q["setup"] == s and q["beta"] == b), None)
            what = ""
            if q is not None and q["masses"]:
                deg, m = np.asarray(q["positions_deg"]), np.asarray(q["masses"])
                # dashed, so that a particle bar under a stem still shows
                ax.vlines(deg, floor, m, color="k", lw=0.9, linestyles=(0, (3, 2)))
                ax.plot(deg, m, "o", ms=5, mfc="none", mec="k", mew=1.0 if q["certified"] else 0.6,
                        label="PDE atoms: mass" + ("" if q["certified"] else " (node groups, not certified)"))
                what = (f"\nPDE: {_n(q['atoms'], 'atom')}, {VERDICT[q['terminal']['verdict']]}, t={q['terminal']['t']:.3g}"
                        if q["certified"] else f"\nPDE: not certified, t={q['t_stop']:.3g}, diffuse {q['diffuse']:.2f}")
            e = None if q is None else q.get("extremum")
            if e is not None and e["masses"]:
                deg, m = np.asarray(e["positions_deg"]), np.asarray(e["masses"])
                ax.plot(deg, m, "x", ms=7, color="tab:purple", mew=1.4,
                        label=f"global extremum of the energy: mass")
            ax.set_yscale("log")
            ax.set_ylim(floor, 1.5)
            ax.set_xlim(-180, 180)
            ax.set_xticks(range(-180, 181, 90))
            ax.set_title(f"{s} beta={b:g}: {_n(r['clusters'], 'cluster')}, t={r['t_stop']:g}{what}", fontsize=8)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("mass", fontsize=8)
            if i == len(show) - 1:
                ax.set_xlabel("angle (deg)", fontsize=8)
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8,
                   frameon=False)
    fig.tight_layout(rect=(0, 0.04 if handles else 0, 1, 1))
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
        print("\nPDE from uniform to its certified terminal state (t_final = inf; docs/terminal.md), next to the "
              "particle clusters at the paper's stop. PDE atoms: mass ± the estimate of the rerun at twice the nodes "
              "(* in the ReLU dead zone); verdict with the largest growth rate; stages: slow stages and plateaus, t entered -> left; "
              "the energy gap to the certified global extremum; particles: single-linkage clusters, the mass near each PDE atom >= 0.01 (0.05 rad) "
              "and the particle mass in the dead zone:")
        for p in pde:
            r = _particles_of(records, p)
            print(f"  {p['setup']:5s} beta={p['beta']:<5g} {_pde_end(p)}; {p['wall']:.1f} s wall, {p['cpu']:.1f} s cpu",
                  flush=True)
            print(f"        PDE atoms ({p['atoms']}): {_pde_atoms(p)}")
            if p["plateaus"] or p.get("slow_stages"):
                print(f"        stages: {_pde_stages(p, k=6)}")
            gap, glob = _pde_global(p)
            if gap != "-":
                print(f"        against the global {p['terminal']['extremum_kind']}: energy gap {gap}; global: {glob}")
            if r is not None:
                dead = "" if r["frozen_mass"] is None else (f"; dead-zone mass {r['frozen_mass']:.3f} (PDE atoms "
                                                            f"there {p['dead_mass']:.3f})")
                print(f"        particles: {r['clusters']} clusters at t={r['t_stop']:g}: {_fmt_masses(r['masses'], 8)}"
                      f"; near the PDE atoms " + (", ".join(f"{m:.3f}" for m in r.get("near_pde_atoms", [])) or "-")
                      + dead, flush=True)


VERDICT = {"stable": "stable", "unstable": "saddle", "marginal": "marginal"}


def _particles_of(records: list[dict], p: dict) -> dict | None:
    return next((r for r in records if r["setup"] == p["setup"] and r["beta"] == p["beta"]), None)


def _pde_end(p: dict) -> str:
    """How a PDE run ended: certified (time, verdict, growth) or why not."""
    T = p["terminal"]
    if T is None:
        return f"{p['status']} (t = {p['t_stop']:.4g}, {p['atoms']} node groups, diffuse {p['diffuse']:.3f})"
    cut = "; rerun cut by the cap: no error bars" if p.get("check_stop") == "max_steps" else ""
    return f"certified at t = {T['t']:.4g}: {VERDICT[T['verdict']]} (growth {T['growth']:.2e}){cut}"


def _pde_atoms(p: dict, k: int = 16) -> str:
    err = p["mass_errors"] or [None] * len(p["masses"])
    dead = p["dead"] or [False] * len(p["masses"])
    items = [f"{m:.4f}" + (f"±{e:.1e}" if e is not None else "") + ("*" if z else "")
             for m, e, z in zip(p["masses"], err, dead)]
    return ", ".join(items[:k]) + (f" ... (+{len(items) - k})" if len(items) > k else "") if items else "none"


def pde_markdown(records: list[dict], pde: list[dict]) -> str:
    """The PDE's terminal states beside the particles' clusters, as a Markdown table (docs/terminal.md)."""
    rows = ["| setup | beta | PDE end | PDE atoms: mass ± error (* dead zone) | slow stages and plateaus: t entered "
            "-> left | energy gap to the global extremum | global | particles: clusters at the stop | dead-zone "
            "mass: particles / PDE atoms | wall (cpu) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in pde:
        r = _particles_of(records, p)
        part = "-" if r is None else f"{r['clusters']} at t = {r['t_stop']:g}: {_fmt_masses(r['masses'], 8)}"
        dead = "-" if r is None or r["frozen_mass"] is None else f"{r['frozen_mass']:.3f} / {p['dead_mass']:.3f}"
        gap, glob = _pde_global(p)
        rows.append(f"| {p['setup']} | {p['beta']:g} | {_pde_end(p)} | {p['atoms']}: {_pde_atoms(p, 20)} | "
                    f"{_pde_stages(p, '<br>')} | {gap} | {glob} | {part} | {dead} | {p['wall']:.0f} s ({p['cpu']:.0f} s) |")
    return "\n".join(rows) + "\n"


GAP_FLOOR = 1e-14


def plot_energy_gaps(pde: list[dict], path: Path) -> None:
    """Does the flow from uniform reach the global extremum? E(end) - E* against sqrt(beta) per setup (log
    scale; a gap below GAP_FLOOR, round-off of energies of order 1, drawn on the floor), filled where the end
    is the global extremum within its error bars (``TerminalState.is_global``), open where it is not."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    setups = sorted({p["setup"] for p in pde}, key=list(SETUPS).index)
    for s in setups:
        rows = [p for p in pde if p["setup"] == s and p["terminal"] is not None
                and p["terminal"].get("energy_gap") is not None]
        if not rows:
            continue
        x = np.sqrt([p["beta"] for p in rows])
        gap = np.maximum([abs(p["terminal"]["energy_gap"]) for p in rows], GAP_FLOOR)
        glob = np.array([bool(p["terminal"].get("is_global")) for p in rows])
        c = SETUPS[s][3]
        ax.plot(x, gap, "-", color=c, lw=0.8, alpha=0.6)
        if glob.any():
            ax.plot(x[glob], gap[glob], "o", color=c, ms=6, label=f"{s} ({SETUPS[s][0]}): the global extremum")
        if (~glob).any():
            ax.plot(x[~glob], gap[~glob], "o", mfc="white", mec=c, mew=1.4, ms=6,
                    label=f"{s} ({SETUPS[s][0]}): not the global one")
    ax.axhline(GAP_FLOOR, color="0.6", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("sqrt(beta)")
    ax.set_ylabel(f"|E(certified end) - E*|   (floor {GAP_FLOOR:g})")
    ax.set_title("The flow from uniform against the global extremum of the energy (Prop. 3.7)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pde_stages(p: dict, sep: str = "; ", k: int = 3) -> str:
    """The slow stages and plateaus of a PDE run in the order the flow met them: t entered -> left, and what
    held the flow there (the slowest unbalanced atom's speed, or the plateau's growth)."""
    items = [(st["t_entered"], f"slow {st['t_entered']:.3g} -> {st['t_left']:.3g} (atom {st['mass']:.3f} at "
                               f"{st['speed']:.1e} rad/t)") for st in p.get("slow_stages", [])]
    items += [(q["t_entered"], f"plateau {q['t_entered']:.3g} -> {q['t_certified']:.3g} (growth {q['growth']:.1e})")
              for q in p["plateaus"]]
    items.sort()
    text = sep.join(t for _, t in items[:k]) or "-"
    if len(items) > k:
        text += f"{sep}... {len(items) - k} more, the last left at t = {_last_left(p):.3g}"
    return text


def _last_left(p: dict) -> float:
    ends = [st["t_left"] for st in p.get("slow_stages", [])] + [q["t_certified"] for q in p["plateaus"]]
    return max(ends) if ends else float("nan")


def _pde_global(p: dict) -> tuple[str, str]:
    """(energy gap, whether the end is the global extremum) of a certified run, '-' otherwise."""
    T = p["terminal"]
    if T is None or T.get("energy_gap") is None:
        return "-", "-"
    return f"{T['energy_gap'] + 0.0:.2e}", ("yes" if T.get("is_global") else "no")


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
    ap.add_argument("--pde-betas", type=str,
                    help="betas of the PDE runs (default: all of --betas; none in --quick unless given)")
    ap.add_argument("--pde-setups", type=str,
                    help="setups of the PDE runs (default: those of --setups with a perceptron, from S1,S2,S3)")
    ap.add_argument("--pde-max-steps", type=int, default=PDE_MAX_STEPS,
                    help=f"cap on the accepted steps of each PDE run's continuation and of its rerun (default "
                         f"{PDE_MAX_STEPS}; 0: none): a run that reaches it is 'not certified: cap reached'")
    ap.add_argument("--no-pde", action="store_true", help="skip the PDE runs")
    ap.add_argument("--replot", action="store_true",
                    help="run nothing: write terminal_table.md and energy_gap.png again from --out's summary.json")
    args = ap.parse_args(argv)
    if args.replot:
        summary = json.loads((args.out / "summary.json").read_text())
        (args.out / "terminal_table.md").write_text(pde_markdown(summary["records"], summary["pde"]))
        plot_energy_gaps(summary["pde"], args.out / "energy_gap.png")
        print(f"wrote {args.out}/terminal_table.md, energy_gap.png")
        return 0
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
        pde_betas = [] if args.quick else list(betas)
    pde_setups = [s for s in setups if SETUPS[s][1] is not None]
    if args.pde_setups is not None:
        pde_setups = [s.strip() for s in args.pde_setups.split(",") if s.strip()]
        bad = [s for s in pde_setups if s not in SETUPS or SETUPS[s][1] is None]
        if bad:
            ap.error(f"--pde-setups: {bad} not among S1, S2, S3 (S1-0: the uniform density is stationary)")
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
    jobs.sort(key=expected_cost, reverse=True)
    t0 = time.perf_counter()
    records, pde = [], []
    with pool:
        print(f"jobs on {pool.description}", flush=True)
        pde_cap = args.pde_max_steps or None
        futs = [pool.submit(_job, kind, s, b, n, args.max_steps, pde_cap) for kind, s, b in jobs]
        for i, (j, r) in enumerate(pool.results(futs), 1):
            kind, s, b = jobs[j]
            (records if kind == "particles" else pde).append(r)
            what = (f"{r['stop_reason']} t={r['t_stop']:g}, {r['clusters']} clusters" if kind == "particles"
                    else f"{r['status']} t={r['t_stop']:.4g}, {r['atoms']} atoms, {len(r['plateaus'])} plateaus")
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
    plot_counts(records, fits, setups, args.out / "clusters_vs_sqrt_beta.png", args.fit_min_beta, title, pde)
    plot_masses(records, setups, args.out / "cluster_masses.png", title, pde)
    plot_final_states(records, setups, args.out / "final_states.png", pde)
    if pde:
        plot_energy_gaps(pde, args.out / "energy_gap.png")
    summary = {
        "settings": {"d": D, "n": n, "dt": DT, "stop": STOP, "max_steps": args.max_steps, "particle_seed": PARTICLE_SEED,
                     "perceptron": f"Perceptron.random(2, 2, activation, 1.0, seed={PERCEPTRON_SEED})",
                     "betas": betas, "setups": {s: SETUPS[s][:2] for s in setups}, "fit_min_beta": args.fit_min_beta,
                     "heavy_mass": HEAVY, "workers": args.workers},
        "theorem_3_5": THEOREM_3_5,
        "wall_time": wall,
        "cpu_time": {"particles": sum(r.get("cpu", 0.0) for r in records), "pde": sum(p["cpu"] for p in pde)},
        "fits": fits,
        "fastest_mode": {str(b): fastest_mode(b) for b in betas},
        "records": [{k: v for k, v in r.items() if k != "final_theta"} for r in records],
        "pde": pde,
        "pde_settings": {"t_final": "inf", "degree": 128, "options": "defaults (4096 nodes, rerun at 8192)",
                         "max_steps": pde_cap, "betas": pde_betas, "setups": pde_setups},
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    if pde:
        (args.out / "terminal_table.md").write_text(pde_markdown(records, pde))
    print(f"\nwall time {wall:.1f} s ({len(jobs)} runs, {args.workers} workers; CPU time of the runs: particles "
          f"{summary['cpu_time']['particles']:.0f} s, PDE {summary['cpu_time']['pde']:.0f} s); wrote {args.out}/summary.json, "
          f"clusters_vs_sqrt_beta.png, cluster_masses.png, final_states.png"
          + (", energy_gap.png, terminal_table.md" if pde else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
