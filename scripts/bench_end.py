#!/usr/bin/env python
"""Benchmark of first runs to their certified end (``t_final = inf``), the error-estimate rerun included, each
against a floor timed in the same run: one node velocity (``measure_velocity`` with the sums ``sum="auto"``
picks) at the run's handoff node count, on nodes spread over the manifold. The ratio is the run's wall time in
such evaluations, a figure another machine can compare; the wall and CPU times are absolute.

1. The sphere's first run to its end: ``attnpde run runs/sphere_descent_relu_end.toml`` (S^2, descent, USA
   beta = 9, the default ReLU perceptron of 3 units, seed 0), a fresh process as a new user starts it; CPU
   time of the process and its threads (goal: <= 20 s wall, <= 20 % of the node steps rejected).
2. The circle S2 (descent, ReLU, seed 111) at beta = 5 to its end: ``solve_pde(model, inf, 64)`` in this
   process (goal: <= 5 s).

Records: {case, seconds, floor_seconds, ratio, target, met} plus cpu_seconds, node steps and rejections, the
rerun's wall time and the load average before and after; ``scripts/bench --only end`` prints them.

    scripts/bench_end.py [--quick] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from solvers import Model, Perceptron, solve_pde
from solvers.interaction import InteractionSums
from solvers.particles import measure_velocity

ROOT = Path(__file__).resolve().parents[1]
SPHERE_RUN = ROOT / "runs" / "sphere_descent_relu_end.toml"
SPHERE_GOAL, REJECTED_GOAL, CIRCLE_GOAL = 20.0, 0.2, 5.0


def velocity_floor(model: Model, n: int, repeats: int = 7) -> float:
    """Best wall time of one node velocity at ``n`` nodes of equal weight spread over the manifold."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, model.d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = np.full(n, 1.0 / n)
    sums = InteractionSums(model.d, model.beta, "auto")
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        measure_velocity(model, sums, x, w)
        best = min(best, time.perf_counter() - t0)
    return best


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def sphere_record() -> dict:
    import h5py

    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=os.environ.get("ATTNPDE_BENCH_TMP")) as tmp:
        out = Path(tmp) / "end.h5"
        cmd = [str(Path(sys.executable).parent / "attnpde"), "run", str(SPHERE_RUN), "--out", str(out), "--quiet"]
        c0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
        with h5py.File(out, "r") as f:
            g = f["pde"]
            steps, rejected = int(g.attrs["node_nsteps"]), int(g.attrs["node_nrejected"])
            stop = g.attrs.get("stop_reason", "")
            stop = stop.decode() if isinstance(stop, bytes) else str(stop)
            check = dict(g["lagrangian/check"].attrs) if "lagrangian/check" in g else {}
            handoff = json.loads(g["lagrangian"].attrs["handoff"]) if "lagrangian" in g else {}
            handoff_nodes = int(handoff.get("nodes", 0))
    model = Model(3, 9.0, "descent", perceptron=Perceptron.random(3, 3, "relu", 1.0, seed=0))
    n = handoff_nodes or 8192
    floor = velocity_floor(model, n)
    share = rejected / max(1, steps + rejected)
    return {"case": "sphere first run to its end: attnpde run runs/sphere_descent_relu_end.toml (S^2 descent ReLU "
                    "beta=9 seed 0, t_final=inf, with the error-estimate rerun)",
            "seconds": wall, "floor_seconds": floor, "ratio": wall / floor,
            "target": f"<= {SPHERE_GOAL:g} s and <= {100 * REJECTED_GOAL:g} % rejected",
            "met": bool(wall <= SPHERE_GOAL and share <= REJECTED_GOAL), "cpu_seconds": cpu,
            "node_steps": steps, "node_rejected": rejected, "stop": stop,
            "rerun_seconds": float(check.get("wall_time", math.nan)), "load": [load0, os.getloadavg()[0]],
            "note": f"wall {wall:.1f} s, CPU {cpu:.1f} s; stop {stop}; node steps {steps}, rejected {rejected} "
                    f"({100 * share:.0f} %); the rerun {float(check.get('wall_time', math.nan)):.1f} s of wall "
                    f"beside or after the run; floor: one node velocity at {n} nodes; load average "
                    f"{load0:.2f} -> {os.getloadavg()[0]:.2f}"}


def circle_record(quick: bool) -> dict:
    model = Model(2, 5.0, "descent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    t_final = 20.0 if quick else math.inf
    load0 = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    r = solve_pde(model, t_final, 64)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    L = r.lagrangian
    n = L.handoff.nodes if L is not None else 2048
    floor = velocity_floor(model, n)
    steps, rejected = (L.node_nsteps, L.node_nrejected) if L is not None else (0, 0)
    rerun = L.check.wall_time if L is not None and L.check is not None else math.nan
    return {"case": f"circle S2 (descent ReLU seed 111) beta=5 to {'its end' if not quick else 't = 20'}: solve_pde("
                    f"model, {t_final:g}, 64), with the error-estimate rerun",
            "seconds": wall, "floor_seconds": floor, "ratio": wall / floor,
            "target": "none (quick mode)" if quick else f"<= {CIRCLE_GOAL:g} s",
            "met": None if quick else bool(wall <= CIRCLE_GOAL), "cpu_seconds": cpu, "node_steps": steps,
            "node_rejected": rejected, "stop": r.stop_reason, "t_stop": float(r.t_stop),
            "rerun_seconds": rerun, "load": [load0, os.getloadavg()[0]],
            "note": f"wall {wall:.2f} s, CPU {cpu:.2f} s; {r.stop_reason} at t = {r.t_stop:.4g}; node steps {steps}, "
                    f"rejected {rejected}; the rerun {rerun:.2f} s of wall beside "
                    f"or after the run; floor: one node velocity at {n} nodes; load average {load0:.2f} -> "
                    f"{os.getloadavg()[0]:.2f}"}


def records(quick: bool = False) -> list[dict]:
    out = [circle_record(quick)]
    if not quick:                   # the sphere's spectral phase alone takes seconds
        out.append(sphere_record())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the circle to t = 20 only, no targets")
    ap.add_argument("--json", type=Path, metavar="PATH")
    args = ap.parse_args(argv)
    recs = records(args.quick)
    for r in recs:
        print(f"{r['case']}: {r['seconds']:.2f} s, floor {r['floor_seconds'] * 1e3:.2f} ms, ratio {r['ratio']:.3g}, "
              f"target {r['target']}: {r['met']}\n    {r['note']}")
    if args.json:
        args.json.write_text(json.dumps(recs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
