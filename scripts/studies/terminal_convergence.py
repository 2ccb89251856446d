#!/usr/bin/env python
"""Certified terminal states against the node count: the masses of the certified atoms at N, 2N and 4N nodes.

Two cases, each run from the uniform density with ``t_final = inf`` (to its certified terminal state,
solvers.terminal), degree 128 on S^1 (L = 32 on S^2), the package's default options except ``nodes``, and
``error_estimate=False`` (the point is to see what the rerun at twice the nodes estimates):

``circle``  the main paper's S2 on the circle: descent, ReLU, ``Perceptron.random(2, 2, 'relu', 1.0,
            seed=111)``, beta = 5; nodes 4096 (the default), 8192, 16384.
``sphere``  the sphere descent setup at beta = 9: ``Perceptron.random(3, 3, 'relu', 1.0, seed=111)``;
            nodes 8192 (the default; a Gauss grid nlat x 2 nlat with nlat = 64), 18432 (nlat = 96) and
            32768 (nlat = 128). The continuation rounds a node count to the Gauss grid 2 nlat^2 with nlat
            = round(sqrt(N / 2)) made even, so 2N = 16384 would be nlat = 92; nlat 64, 96, 128 steps the
            grid spacing, which sets the quadrature error of a basin on S^2 (order N^-1/2), evenly.

Printed per case: how each run ended (time certified, verdict, plateaus, wall and CPU time), and the
certified atoms paired by position across N (the nearest atom within 0.1 rad of each atom of the finest
run), with the differences |m_N - m_4N| and |m_2N - m_4N|, next to one node's weight 1/N (on S^2 the
node weights are rho x Gauss weight, about 1/N).

    scripts/studies/terminal_convergence.py [--cases circle,sphere] [--factors 1,2,4] [--workers 2] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

#: name -> (d, beta, degree, node counts)
CASES = {
    "circle": (2, 5.0, 128, (4096, 8192, 16384)),
    "sphere": (3, 9.0, 32, (8192, 18432, 32768)),
}
PERCEPTRON_SEED = 111
PAIR_RADIUS = 0.1       # rad: atoms of two runs within this of each other are the same atom


def run(case: str, nodes: int) -> dict:
    """One run to its certified end at ``nodes`` nodes, without the error-estimate rerun."""
    from solvers import Model, Perceptron, solve_pde

    d, beta, degree, _ = CASES[case]
    model = Model(d, beta, "descent", perceptron=Perceptron.random(d, d, "relu", 1.0, seed=PERCEPTRON_SEED))
    t0, c0 = time.perf_counter(), time.process_time()
    r = solve_pde(model, math.inf, degree, nodes=nodes, error_estimate=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    T = r.terminal
    lag = r.lagrangian
    return {"case": case, "nodes": nodes, "handoff_nodes": None if lag is None else lag.handoff.nodes, "stop_reason": r.stop_reason,
            "message": r.message, "t_stop": float(r.t_stop), "certified": T is not None,
            "t": None if T is None else T.t, "verdict": None if T is None else T.verdict,
            "growth": None if T is None else T.growth,
            "positions": [] if T is None else T.positions.tolist(), "masses": [] if T is None else T.masses.tolist(),
            "plateaus": [{k: v for k, v in p.to_dict().items() if k != "direction"} for p in r.plateaus],
            "node_steps": None if lag is None else lag.node_nsteps, "wall": wall, "cpu": cpu}


def paired(runs: list[dict]) -> list[dict]:
    """Each atom of the finest certified run with the masses of the nearest atom (within PAIR_RADIUS) of
    every run (NaN where there is none)."""
    done = [r for r in runs if r["certified"]]
    if not done:
        return []
    finest = max(done, key=lambda r: r["nodes"])
    rows = []
    for p in np.asarray(finest["positions"]):
        ms = []
        for r in runs:
            pos = np.asarray(r["positions"]).reshape(-1, len(p))
            if not len(pos):
                ms.append(float("nan"))
                continue
            j = int(np.argmax(pos @ p))
            near = math.acos(min(1.0, float(pos[j] @ p))) < PAIR_RADIUS
            ms.append(float(r["masses"][j]) if near else float("nan"))
        rows.append({"position": p.tolist(), "masses": ms})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="circle,sphere", help="comma-separated, from circle,sphere")
    ap.add_argument("--factors", default="1,2,4",
                    help="which of each case's three node counts (1: N, 2: 2N, 4: 4N; default all)")
    ap.add_argument("--workers", type=int, default=2, help="local processes (default 2)")
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown {bad}; choose from {', '.join(CASES)}")
    pick = {"1": 0, "2": 1, "4": 2}
    idx = sorted({pick[f.strip()] for f in args.factors.split(",") if f.strip() in pick})
    jobs = [(c, CASES[c][3][i]) for c in cases for i in idx]
    jobs.sort(key=lambda j: -j[1] * (4 if CASES[j[0]][0] == 3 else 1))       # the largest first
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as ex:
        futs = {ex.submit(run, c, n): (c, n) for c, n in jobs}
        results = {}
        for f in futs:
            results[futs[f]] = f.result()
    wall = time.perf_counter() - t0
    out = {}
    for c in cases:
        d, beta, degree, _ = CASES[c]
        runs = [results[(c, n)] for cc, n in sorted(results) if cc == c]
        runs.sort(key=lambda r: r["nodes"])
        print(f"\n{c}: S^{d - 1}, descent, ReLU (seed {PERCEPTRON_SEED}), beta = {beta:g}, degree {degree}, "
              "t_final = inf, error_estimate=False")
        for r in runs:
            end = (f"certified at t = {r['t']:.6g}, {len(r['masses'])} atoms, {r['verdict']} (growth {r['growth']:.2e})"
                   if r["certified"] else f"not certified: {r['stop_reason']} at t = {r['t_stop']:.6g} ({r['message']})")
            print(f"  N = {r['nodes']:6d} (handoff nodes {r['handoff_nodes']}): {end}; {len(r['plateaus'])} plateaus; "
                  f"{r['node_steps']} steps; {r['wall']:.1f} s wall, {r['cpu']:.1f} s cpu")
        rows = paired(runs)
        ns = [r["nodes"] for r in runs]
        if rows:
            print("  atoms paired by position (the finest run's, heaviest first): masses at N = "
                  + ", ".join(map(str, ns)) + "; differences from the finest")
            for a in rows:
                ms = a["masses"]
                diff = [abs(m - ms[-1]) for m in ms[:-1]]
                print(f"    at {np.round(a['position'], 3).tolist()}: " + ", ".join(f"{m:.6f}" for m in ms)
                      + "; " + ", ".join(f"{v:.1e}" for v in diff))
            print("  one node's weight 1/N: " + ", ".join(f"{1 / n:.1e}" for n in ns))
        out[c] = {"runs": runs, "paired": rows}
    print(f"\nwall time {wall:.1f} s ({len(jobs)} runs, {args.workers} workers)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
