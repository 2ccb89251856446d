#!/usr/bin/env python
"""The PDE to its atoms: the Lagrangian continuation from uniform data to the terminal state.

Three studies (``--study``, all by default), each printing a table and writing JSON records:

``terminal``   The main paper's setups (the main paper §4; The model §5) from uniform data to "stationary" (or to
               T_FINAL: 2000 on S^1, 400 on S^2): on S^1 S1 (ascent, ReLU), S1-0 (ascent, no perceptron), S2 (descent, ReLU), S3
               (descent, GeLU) at beta = 1, 5, 25; on S^2 descent with ReLU and ascent with GeLU at beta = 1,
               9 (the runs/ sphere setups). Perceptron.random(d, d, activation, 1.0, seed=111), USA, gamma = 1,
               default options (the continuation, its error estimate at twice the nodes). Reported: how and
               when the run ended, the atoms (mass >= 0.01) with masses ± their estimate, the mass in atoms,
               the diffuse mass, the wall time. S1-0 starts from rho_0 = 1 + 0.2 cos(3 theta) as in
               runs/circle_S1-0_ascent_attention.toml (the uniform density is an exact stationary state of
               pure attention: the continuation stops there at once, "stationary", with no atom).
``convergence`` One ReLU case on each manifold (S2 at beta = 5 on S^1, 1024 to 32768 nodes to t = 400;
               sphere descent at beta = 9, 2048 to 8192 nodes to t = 60), no error-estimate rerun: every
               atom's mass at each N, the observed order log2(|m_N - m_2N| / |m_2N - m_4N|) of the first
               three, and the differences from the finest N with their fitted slope against N.
``particles``  The particle limit at the level of atoms, S1 and S2 at beta = 5 (the PDE to t = 2000 and
               8000: see PARTICLE_PDE_T_FINAL): the paper's particle protocol
               (explicit Euler, dt = 0.1, its stopping rule: cluster count unchanged over 5 snapshots and max
               drift <= 5e-4, linkage scale 0.5), N = 1e3 and 1e4 (8 seeds) and 1e5 (2 seeds), against the
               continuation's terminal atoms: for each atom of mass >= 0.01, the particle mass within 0.05 rad
               of it (mean over seeds), its error against N and the fitted slope of log(error) against
               log(N), the clusters (single linkage, the paper's rule) of the particles outside every
               atom's cap — atoms the mean field does not have —, and the clusters of all the particles
               that pair with no atom (there, two atoms chained through a few stray particles).

    scripts/studies/continuation_study.py [--study terminal,convergence,particles] [--quick] [--workers 2]
                                  [--json OUT] [--cases d:setup:beta,...] [--setups S1,S2]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from solvers import Model, Perceptron, simulate_particles, solve_pde  # noqa: E402
from solvers.atoms import Atoms  # noqa: E402
from solvers.comparison import terminal_atoms  # noqa: E402
from solvers.particles import cluster_radius  # noqa: E402

PERCEPTRON_SEED = 111
HEAVY = 0.01
CAP = 0.05          #: radius (rad) of the cap around a PDE atom whose particle mass is compared with it
CIRCLE = {"S1": ("ascent", "relu"), "S1-0": ("ascent", None), "S2": ("descent", "relu"), "S3": ("descent", "gelu")}
SPHERE = {"descent-relu": ("descent", "relu"), "ascent-gelu": ("ascent", "gelu")}
CIRCLE_BETAS, SPHERE_BETAS = (1.0, 5.0, 25.0), (1.0, 9.0)
T_FINAL = {2: 2000.0, 3: 400.0}
SAVE_EVERY = {2: 5.0, 3: 5.0}


def model_for(d: int, flow: str, activation: str | None, beta: float) -> Model:
    p = None if activation is None else Perceptron.random(d, d, activation, 1.0, seed=PERCEPTRON_SEED)
    return Model(d, beta, flow, perceptron=p)


def s1_0_initial(x: np.ndarray) -> np.ndarray:
    return 1.0 + 0.2 * np.cos(3.0 * np.arctan2(x[:, 1], x[:, 0]))


def _atoms_record(atoms) -> dict:
    heavy = atoms.masses >= HEAVY
    err = atoms.mass_errors if atoms.mass_errors is not None else np.full(len(atoms), np.nan)
    return {"positions": atoms.positions[heavy].tolist(), "masses": atoms.masses[heavy].tolist(),
            "mass_errors": err[heavy].tolist(), "light_mass": float(atoms.masses[~heavy].sum()),
            "diffuse": atoms.diffuse, "diffuse_error": atoms.diffuse_error,
            "in_atoms": float(atoms.masses.sum())}


# --- terminal states -----------------------------------------------------------------------------------
def terminal(case: tuple, t_final: float | None = None, nodes: int | None = None,
             error_estimate: bool = True) -> dict:
    d, name, beta = case
    flow, act = (CIRCLE if d == 2 else SPHERE)[name]
    model = model_for(d, flow, act, beta)
    initial = s1_0_initial if name == "S1-0" else "uniform"
    t_final = t_final or T_FINAL[d]
    t0 = time.perf_counter()
    r = solve_pde(model, t_final, 64 if d == 2 else 16, initial=initial, save_every=SAVE_EVERY[d],
                  error_estimate=error_estimate, **({"nodes": nodes} if nodes else {}))
    wall = time.perf_counter() - t0
    h = r.lagrangian.handoff if r.lagrangian else None
    rec = {"d": d, "setup": name, "beta": beta, "stop": r.stop_reason, "t_stop": float(r.t_stop),
           "message": r.message, "wall": wall, "handoff_t": h.t if h else None,
           "handoff_reason": h.reason if h else None, "nodes": h.nodes if h else None,
           "nodes_end": len(r.nodes[-1]["w"]) if r.nodes and r.nodes[-1] is not None else None,
           "max_drift_end": r.nodes[-1]["max_drift"] if r.nodes and r.nodes[-1] is not None else None}
    rec.update(_atoms_record(r.atoms()))
    return rec


def terminal_cases(quick: bool) -> list[tuple]:
    if quick:
        return [(2, "S1", 5.0), (2, "S1-0", 5.0)]
    return [(2, s, b) for s in CIRCLE for b in CIRCLE_BETAS] + [(3, s, b) for s in SPHERE for b in SPHERE_BETAS]


def print_terminal(rows: list[dict]) -> None:
    print("\nterminal states from uniform data (atoms: node groups of mass >= 0.01, ± the error estimate "
          "from the rerun at twice the nodes)")
    for r in rows:
        atoms = ", ".join(f"{m:.4f}±{e:.1e}" for m, e in zip(r["masses"], r["mass_errors"])) or "none"
        handoff = "-" if r["handoff_t"] is None else f"{r['handoff_t']:.4g}"
        diffuse_err = "" if r["diffuse_error"] is None else f"±{r['diffuse_error']:.1e}"
        drift = "-" if r["max_drift_end"] is None else f"{r['max_drift_end']:.2g}"
        print(f"  S^{r['d'] - 1} {r['setup']:12s} beta={r['beta']:<4g} {r['stop']:10s} t={r['t_stop']:<9.4g} "
              f"handoff t={handoff} nodes {r['nodes']}->{r['nodes_end']} | atoms {atoms} | in atoms "
              f"{r['in_atoms']:.4f} (lighter pieces {r['light_mass']:.4f}) diffuse {r['diffuse']:.4f}{diffuse_err} "
              f"| max|v| end {drift} | {r['wall']:.0f} s", flush=True)


def _terminal_job(arg: tuple) -> dict:
    case, kw = arg
    return terminal(case, **kw)


# --- convergence in the node count -------------------------------------------------------------------------
#: d -> (case, node counts, end time): N, 2N, 4N, ... (on S^2 each rounded to a Gauss grid 2 nlat^2)
CONVERGENCE = {2: ((2, "S2", 5.0), (1024, 2048, 4096, 8192, 16384, 32768), 400.0),
               3: ((3, "descent-relu", 9.0), (2048, 4096, 8192), 60.0)}


def convergence(d: int, quick: bool) -> dict:
    """Atom masses at each node count of CONVERGENCE (the same end time, no error-estimate rerun): the
    observed order log2(|m_N - m_2N| / |m_2N - m_4N|) of the first three, and the differences from the
    finest count with the least-squares slope of log(mean difference) against log(N)."""
    case, counts, t_final = CONVERGENCE[d]
    if quick:
        counts, t_final = tuple(n // 4 for n in counts[:3]), t_final / 10
    runs = [terminal(case, t_final=t_final, nodes=n, error_estimate=False) for n in counts]
    finest = np.array(runs[-1]["positions"]).reshape(-1, d)
    table = []
    for p in finest:
        ms = []
        for r in runs:
            pos = np.array(r["positions"]).reshape(-1, d)
            j = int(np.argmax(pos @ p)) if len(pos) else -1
            ms.append(r["masses"][j] if j >= 0 and math.acos(min(1.0, float(pos[j] @ p))) < 0.1 else float("nan"))
        d1, d2 = abs(ms[0] - ms[1]), abs(ms[1] - ms[2])
        order = math.log2(d1 / d2) if d1 > 0 and d2 > 0 else float("nan")
        table.append({"position": p.tolist(), "masses": ms, "order": order,
                      "difference_from_finest": [abs(m - ms[-1]) for m in ms[:-1]]})
    nodes = np.array([r["nodes"] for r in runs[:-1]], dtype=float)
    mean = np.nanmean([a["difference_from_finest"] for a in table], axis=0) if table else np.zeros(0)
    slope = float(np.polyfit(np.log(nodes), np.log(mean), 1)[0]) if len(mean) > 1 and np.all(mean > 0) else float("nan")
    return {"case": case, "nodes": [r["nodes"] for r in runs], "t_final": t_final, "atoms": table,
            "mean_difference_from_finest": mean.tolist(), "slope": slope,
            "diffuse": [r["diffuse"] for r in runs], "walls": [r["wall"] for r in runs]}


def print_convergence(res: dict) -> None:
    d, name, beta = res["case"]
    print(f"\nconvergence in the node count: S^{d - 1} {name} beta={beta} to t={res['t_final']:g}, nodes {res['nodes']} "
          f"(walls {', '.join(f'{w:.0f}' for w in res['walls'])} s); diffuse {', '.join(f'{v:.5f}' for v in res['diffuse'])}")
    for a in res["atoms"]:
        print(f"  atom at {np.round(a['position'], 3).tolist()}: masses {', '.join(f'{m:.6f}' for m in a['masses'])}; "
              f"observed order (N, 2N, 4N) {a['order']:.2f}; differences from the finest "
              f"{', '.join(f'{v:.1e}' for v in a['difference_from_finest'])}", flush=True)
    print(f"  mean difference from the finest: {', '.join(f'{v:.1e}' for v in res['mean_difference_from_finest'])}; "
          f"fitted slope against N {res['slope']:.2f} (one node weighs 1/N: {', '.join(f'{1 / n:.1e}' for n in res['nodes'][:-1])})")


# --- the particle limit ------------------------------------------------------------------------------------
PARTICLE_NS = ((1000, 8), (10_000, 8), (100_000, 2))
#: the PDE's end time per setup: S2's dead zone feeds its atoms slowly (diffuse mass 0.038 at t = 2000,
#: 0.006 at 6000), while its particles stop at t = 800 to 3100 (N = 1e3 to 1e5)
PARTICLE_PDE_T_FINAL = {"S1": 2000.0, "S2": 8000.0}


def particle_job(args: tuple) -> dict:
    setup, beta, n, seed, atoms = args
    flow, act = CIRCLE[setup]
    model = model_for(2, flow, act, beta)
    t0 = time.perf_counter()
    r = simulate_particles(model, n, seed=seed, integrator="euler", dt=0.1, stop={"window": 5, "drift_tol": 5e-4,
                           "scale": 0.5}, max_steps=200_000)
    cmp = terminal_atoms(atoms, r.x[-1], r.w, cluster_radius(beta, 2, 0.5), cap=CAP, min_mass=HEAVY)
    return {"setup": setup, "beta": beta, "n": n, "seed": seed, "stop": r.stop_reason, "t_stop": float(r.t_stop),
            "near": cmp["cap_masses"], "pde_masses": cmp["pde_masses"], "extra": [m for _, m in cmp["outside"]],
            "chained": [m for _, m in cmp["unmatched_particles"]], "wall": time.perf_counter() - t0}


def particle_limit(quick: bool, workers: int, setups: tuple = ("S1", "S2")) -> list[dict]:
    out = []
    ns = ((200, 2), (1000, 2)) if quick else PARTICLE_NS
    for setup in setups:
        pde = terminal((2, setup, 5.0), t_final=200.0 if quick else PARTICLE_PDE_T_FINAL[setup])
        atoms = Atoms(np.array(pde["positions"]).reshape(-1, 2), np.array(pde["masses"]))
        jobs = [(setup, 5.0, n, 42 + s, atoms) for n, seeds in ns for s in range(seeds)]
        with ProcessPoolExecutor(workers) as ex:
            runs = list(ex.map(particle_job, jobs))
        per_n = {}
        for r in runs:
            per_n.setdefault(r["n"], []).append(r)
        rows = []
        for n, rs in sorted(per_n.items()):
            near = np.array([q["near"] for q in rs])                    # (seeds, atoms)
            err = np.abs(near - np.array(rs[0]["pde_masses"])[None, :])
            rows.append({"n": n, "seeds": len(rs), "near_mean": near.mean(axis=0).tolist(),
                         "error_mean": err.mean(axis=0).tolist(), "extra_clusters": [q["extra"] for q in rs],
                         "unmatched_clusters": [q["chained"] for q in rs],
                         "stops": sorted({q["stop"] for q in rs}), "t_stop_mean": float(np.mean([q["t_stop"] for q in rs])),
                         "wall_mean": float(np.mean([q["wall"] for q in rs]))})
        e = np.array([np.mean(r["error_mean"]) for r in rows])
        nn = np.array([r["n"] for r in rows], dtype=float)
        slope = float(np.polyfit(np.log(nn), np.log(e), 1)[0]) if np.all(e > 0) and len(e) > 1 else float("nan")
        out.append({"setup": setup, "beta": 5.0, "pde": pde, "rows": rows, "slope": slope})
    return out


def print_particles(res: list[dict]) -> None:
    for s in res:
        p = s["pde"]
        print(f"\nparticle limit, {s['setup']} beta=5: continuation atoms "
              + ", ".join(f"{m:.4f}±{e:.1e}" for m, e in zip(p["masses"], p["mass_errors"]))
              + f", diffuse {p['diffuse']:.4f} ({p['stop']} at t={p['t_stop']:.4g})")
        for r in s["rows"]:
            extra = [len(x) for x in r["extra_clusters"]]
            print(f"  N={r['n']:>6d} ({r['seeds']} seeds, {'/'.join(r['stops'])}, mean t_stop {r['t_stop_mean']:.4g}, "
                  f"{r['wall_mean']:.0f} s/run): particle mass within 0.05 rad of each atom "
                  + ", ".join(f"{m:.4f}" for m in r["near_mean"])
                  + f"; mean |error| {np.mean(r['error_mean']):.2e}; clusters >= 0.01 outside every atom's cap: "
                  f"{extra} per seed (masses {sorted(round(m, 3) for x in r['extra_clusters'] for m in x)}); "
                  f"clusters of all particles paired with no atom: {[len(x) for x in r['unmatched_clusters']]}",
                  flush=True)
        print(f"  fitted slope of log(mean |error|) against log(N): {s['slope']:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--study", default="terminal,convergence,particles")
    ap.add_argument("--quick", action="store_true", help="a smoke test: two short circle cases, small N")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cases", help="terminal study only: comma-separated d:setup:beta, e.g. 2:S2:5,3:descent-relu:9")
    ap.add_argument("--setups", default="S1,S2", help="particles study only: the circle setups (S1, S2)")
    ap.add_argument("--json", help="write the records as JSON")
    args = ap.parse_args(argv)
    studies = args.study.split(",")
    unknown = set(studies) - {"terminal", "convergence", "particles"}
    if unknown:
        print(f"unknown study {sorted(unknown)}", file=sys.stderr)
        return 2
    out = {}
    if "terminal" in studies:
        cases = terminal_cases(args.quick)
        if args.cases:
            cases = [(int(c.split(":")[0]), c.split(":")[1], float(c.split(":")[2])) for c in args.cases.split(",")]
        kw = {"t_final": 200.0} if args.quick else {}
        with ProcessPoolExecutor(args.workers) as ex:
            out["terminal"] = list(ex.map(_terminal_job, [(c, kw) for c in cases]))
        print_terminal(out["terminal"])
    if "convergence" in studies:
        out["convergence"] = [convergence(d, args.quick) for d in ((2,) if args.quick else (2, 3))]
        for res in out["convergence"]:
            print_convergence(res)
    if "particles" in studies:
        out["particles"] = particle_limit(args.quick, args.workers, tuple(args.setups.split(",")))
        print_particles(out["particles"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
