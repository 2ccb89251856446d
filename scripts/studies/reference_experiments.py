#!/usr/bin/env python
"""The particle experiments of the main paper (the main paper §4; The model §5) with the project's solver.

Protocol (the main paper's setup, with this package's default stopping rule; ``scripts/studies/paper_protocol.py``
clusters by the released code's rule, with its spread condition): N = 1000 particles i.i.d. uniform on S^{d-1} (particle seed
42), a ReLU perceptron with d units, a_k uniform on the sphere and c_k standard normal (perceptron
seed 111, the same weights for every beta), USA with gamma = 1 and the kernel exp(beta(<x,y> - 1)),
explicit Euler with dt = 0.1, one snapshot every 10 steps, and the stopping rule: the cluster count
(single linkage at geodesic radius min(0.5 / sqrt(beta), pi / (2 d))) unchanged over 5 snapshots and
max_i |v(x_i)| <= 5e-4; at most 200000 steps.

Setups: S^1 ascent (d = 2) and descent in d = 4, 5, 7, 10, 20, 50 (The model §5's dimensions), each for
beta in {1, 5, 25}; ``--dims`` takes any d >= 2 (d = 2 runs ascent, every other d descent). A run takes
up to about 2 minutes on 2 cores (d = 10, 20, 50 at beta = 1 and 25: 131, 72, 35, 45, 26 and 36 s;
direct sums).
For each run: stop reason and time, number of clusters, their masses (heaviest first), how many are
single particles (mass 1/N: in descent, particles frozen where every ReLU unit is inactive).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

from solvers import Model, Perceptron, simulate_particles  # noqa: E402
from solvers.particles import cluster_radius  # noqa: E402

PARTICLE_SEED = 42
PERCEPTRON_SEED = 111
DIMS = [2, 4, 5, 7, 10, 20, 50]
BETAS = [1.0, 5.0, 25.0]


def run_one(d: int, flow: str, beta: float, n: int = 1000, dt: float = 0.1, max_steps: int = 200_000,
            scale: float = 0.5) -> dict:
    """One run of the protocol; returns its summary record."""
    perceptron = Perceptron.random(d, d, "relu", 1.0, seed=PERCEPTRON_SEED)
    model = Model(d, beta, flow, perceptron=perceptron)
    t0 = time.perf_counter()
    r = simulate_particles(model, n=n, init="random", seed=PARTICLE_SEED, integrator="euler", dt=dt,
                           stop={"window": 5, "drift_tol": 5e-4, "scale": scale}, max_steps=max_steps)
    wall = time.perf_counter() - t0
    centres, masses = r.clusters(-1, scale=scale)
    return {"d": d, "flow": flow, "beta": beta, "n": n, "stop_reason": r.stop_reason, "t_stop": r.t_stop,
            "steps": r.nsteps, "radius": cluster_radius(beta, d, scale), "clusters": len(masses),
            "masses": masses.tolist(), "singletons": int(np.sum(np.isclose(masses, 1.0 / n))),
            "max_drift": float(r.max_drift[-1]), "energy": [float(r.energy[0]), float(r.energy[-1])],
            "sums": r.sum_method, "wall": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="particles (default 1000, the paper's)")
    ap.add_argument("--betas", type=float, nargs="+", default=BETAS)
    ap.add_argument("--dims", type=int, nargs="+", default=DIMS,
                    help="the dimensions d of S^(d-1), each >= 2 (2 = S^1 ascent; others descent; default "
                         + " ".join(map(str, DIMS)) + ")")
    ap.add_argument("--max-steps", type=int, default=200_000)
    ap.add_argument("--json", type=Path, help="write the records to this file")
    args = ap.parse_args(argv)
    bad = [d for d in args.dims if d < 2]
    if bad or args.n < 2 or args.max_steps < 1 or any(not 0 < b < math.inf for b in args.betas):
        ap.error(f"--dims must be >= 2 (got {bad})" if bad else "--n must be >= 2" if args.n < 2
                 else "--max-steps must be >= 1" if args.max_steps < 1
                 else f"--betas must be finite and > 0 (got {args.betas})")
    print(f"particle seed {PARTICLE_SEED}, perceptron seed {PERCEPTRON_SEED} (Perceptron.random(d, d, 'relu', 1.0)), "
          f"N = {args.n}, explicit Euler dt = 0.1, snapshot every 10 steps, stop: 5 snapshots, drift <= 5e-4",
          flush=True)
    records = []
    for d in dict.fromkeys(args.dims):                 # in the order given, once each
        flow = "ascent" if d == 2 else "descent"
        p = Perceptron.random(d, d, "relu", 1.0, seed=PERCEPTRON_SEED)
        print(f"\nS^{d - 1} {flow}, ReLU perceptron c = {np.round(p.c, 4).tolist()}", flush=True)
        for beta in args.betas:
            rec = run_one(d, flow, beta, n=args.n, max_steps=args.max_steps)
            records.append(rec)
            m = rec["masses"]
            print(f"  beta={beta:<5g} {rec['stop_reason']:>9} at t={rec['t_stop']:<8g} ({rec['steps']} steps, "
                  f"{rec['sums']} sums, {rec['wall']:.1f} s)  radius {rec['radius']:.4f}: {rec['clusters']} clusters "
                  f"({rec['singletons']} single particles); masses "
                  + ", ".join(f"{v:.3f}" for v in m[:10]) + (" ..." if len(m) > 10 else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
