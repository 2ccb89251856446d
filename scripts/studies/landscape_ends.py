#!/usr/bin/env python
"""A flow's certified end beside the global extremum of the energy (docs/landscape.md): the PDE from the uniform
density to its certified terminal state (``solve_pde(model, inf, degree)``, default options), the certified
extremum (``solvers.extremum``), and the comparison (``solvers.compare_end``), for a few of the protocol's models.

    .venv/bin/python scripts/studies/landscape_ends.py [--cases S1-5,S1-15,S2-5,S3-5,sphere-9] [--json OUT]

Cases: the paper protocol's S1 (ascent, ReLU), S2 (descent, ReLU), S3 (descent, GeLU) on S^1 at the beta in
the name (``Perceptron.random(2, 2, activation, 1.0, seed=111)``, degree 128), and the sphere descent (ReLU)
at beta = 9 of docs/terminal.md (``Perceptron.random(3, 3, "relu", 1.0, seed=111)``, degree 32).
"""
from __future__ import annotations

import argparse
import json
import math
import time

from solvers import Model, Perceptron, compare_end, extremum, solve_pde

CASES = {"S1-5": (2, "ascent", "relu", 5.0), "S1-15": (2, "ascent", "relu", 15.0),
         "S2-5": (2, "descent", "relu", 5.0), "S3-5": (2, "descent", "gelu", 5.0),
         "sphere-9": (3, "descent", "relu", 9.0)}


def run(name: str) -> dict:
    d, flow, activation, beta = CASES[name]
    model = Model(d, beta, flow, perceptron=Perceptron.random(d, d, activation, 1.0, seed=111))
    t0 = time.perf_counter()
    r = solve_pde(model, math.inf, 128 if d == 2 else 32)
    wall = time.perf_counter() - t0
    e = extremum(model)
    rec = {"case": name, "pde_wall": wall, "stop": r.stop_reason, "message": r.message,
           "extremum_masses": sorted(map(float, e.masses), reverse=True), "E_star": e.energy, "gap": e.gap}
    T = r.terminal
    if T is None:
        rec["end"] = None
        return rec
    c = compare_end(model, T.positions, T.masses, T.position_errors, T.mass_errors, extremum=e)
    rec.update({"end_masses": sorted(map(float, T.masses), reverse=True), "verdict": T.verdict,
                "energy_gap": c.energy_gap, "energy_error": c.energy_error, "matched": c.matched,
                "is_global": c.is_global, "kernel_distance": c.kernel_distance, "reason": c.reason})
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out = []
    for name in args.cases.split(","):
        rec = run(name)
        out.append(rec)
        if rec.get("end_masses") is None:
            print(f"{name}: PDE not certified ({rec['stop']}: {rec['message']})", flush=True)
            continue
        print(f"{name}: end {len(rec['end_masses'])} atoms ({rec['verdict']}) "
              f"{', '.join(f'{m:.4f}' for m in rec['end_masses'])}; extremum {len(rec['extremum_masses'])} atoms "
              f"{', '.join(f'{m:.4f}' for m in rec['extremum_masses'])}; energy gap {rec['energy_gap']:.3g} "
              f"(end's energy error {rec['energy_error']:.2g}); {'GLOBAL' if rec['is_global'] else 'not global'}; "
              f"PDE {rec['pde_wall']:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
