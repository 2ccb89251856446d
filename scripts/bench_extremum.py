#!/usr/bin/env python3
"""The global extremum of the energy (solvers.extremum) for the paper protocol's models: time, atoms, energy, gap.

S^1: the protocol's setups (scripts/studies/paper_protocol.py: S1 ascent ReLU, S1-0 ascent without perceptron,
S2 descent ReLU, S3 descent GeLU; ``Perceptron.random(2, 2, activation, 1.0, seed=111)``, USA, gamma = 1) at
its 13 betas. S^2: the same setups with ``Perceptron.random(3, 3, activation, 1.0, seed=111)`` (units = d, as
the protocol's rule). Target (issue 66): at most 10 s per model on S^1, 60 s on S^2. Floor: one evaluation of
Phi and grad Phi (``Model.first_variation_direct``) at as many points as the certificate evaluated cells, for
the extremum's atoms, timed in the same run: the certificate's own irreducible work (none for the ascent's
quadratic programs and the closed forms).

    .venv/bin/python scripts/bench_extremum.py [--quick] [--d 2,3] [--json PATH] [--markdown PATH]

``records(quick)`` returns records {case, seconds, floor_seconds, ratio, target, met} (plus setup, d, beta,
kind, method, atoms, masses, energy, gap) for scripts/bench; --markdown writes the table docs/landscape.md shows.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "studies"))
from paper_protocol import BETAS, QUICK_BETAS, SETUPS  # noqa: E402
from reference_experiments import PERCEPTRON_SEED  # noqa: E402

from solvers import Model, Perceptron, extremum  # noqa: E402

TARGET = {2: 10.0, 3: 60.0}


def model_for(setup: str, d: int, beta: float) -> Model:
    flow, activation = SETUPS[setup][:2]
    p = None if activation is None else Perceptron.random(d, d, activation, 1.0, seed=PERCEPTRON_SEED)
    return Model(d, beta, flow, perceptron=p)


def _floor(model: Model, e, repeats: int = 3) -> float | None:
    if e.evaluations == 0 or e.kind != "minimum" or len(e.masses) == 0:
        return None
    rng = np.random.default_rng(0)
    y = rng.standard_normal((e.evaluations, model.d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for s in range(0, len(y), 200_000):
            model.first_variation_direct(y[s:s + 200_000], e.positions, e.masses)
        best = min(best, time.perf_counter() - t0)
    return best


def record(setup: str, d: int, beta: float, quick: bool = False) -> dict:
    model = model_for(setup, d, beta)
    t0 = time.perf_counter()
    e = extremum(model)
    seconds = time.perf_counter() - t0
    floor = _floor(model, e)
    return {"case": f"extremum S^{d - 1} {setup} beta={beta:g}: {e.kind}, {len(e.masses)} atom(s), gap {e.gap:.2g}",
            "seconds": seconds, "floor_seconds": floor, "ratio": None if floor is None else seconds / floor,
            "target": "none (quick mode)" if quick else f"<= {TARGET.get(d, 60.0):g} s",
            "met": None if quick else bool(seconds <= TARGET.get(d, 60.0)),
            "setup": setup, "d": d, "beta": beta, "kind": e.kind, "method": e.method, "atoms": len(e.masses),
            "masses": [float(m) for m in e.masses], "energy": e.energy, "gap": e.gap, "rounds": e.rounds,
            "cells": e.evaluations, "continuous": e.continuous is not None,
            "note": f"{e.method}; certificate cells {e.evaluations}; masses "
                    + (", ".join(f"{m:.4f}" for m in sorted(e.masses, reverse=True)) if len(e.masses)
                       else "(uniform)")}


def records(quick: bool, dims=(2, 3)) -> list[dict]:
    betas = QUICK_BETAS if quick else BETAS
    out = []
    for d in dims:
        for setup in SETUPS:
            for beta in betas:
                out.append(record(setup, d, beta, quick))
    return out


def markdown(recs: list[dict]) -> str:
    lines = ["| S^(d-1) | setup | beta | kind | atoms | masses | E* | gap | time (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in recs:
        masses = ("uniform" if r["continuous"] else
                  ", ".join(f"{m:.4f}" for m in sorted(r["masses"], reverse=True)[:6])
                  + (f", ... ({r['atoms']})" if r["atoms"] > 6 else ""))
        lines.append(f"| S^{r['d'] - 1} | {r['setup']} | {r['beta']:g} | {r['kind']} | {r['atoms']} | {masses} | "
                     f"{r['energy']:.12g} | {r['gap']:.2g} | {r['seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="betas 0.01, 1, 5 only (no target applies)")
    ap.add_argument("--d", default="2,3", help="dimensions, comma-separated (default 2,3)")
    ap.add_argument("--json", help="write the records as JSON")
    ap.add_argument("--markdown", help="write the table as Markdown")
    args = ap.parse_args(argv)
    dims = tuple(int(v) for v in args.d.split(","))
    recs = []
    for d in dims:
        for setup in SETUPS:
            for beta in (QUICK_BETAS if args.quick else BETAS):
                r = record(setup, d, beta, args.quick)
                recs.append(r)
                ratio = "" if r["ratio"] is None else f", {r['ratio']:.1f}x the floor"
                print(f"{r['case']}: {r['seconds']:.2f} s{ratio}; E* = {r['energy']:.12g}; {r['note']}", flush=True)
    worst = {d: max(r["seconds"] for r in recs if r["d"] == d) for d in dims}
    print("slowest: " + ", ".join(f"S^{d - 1} {worst[d]:.2f} s (target {TARGET.get(d, 60.0):g} s)" for d in dims))
    if args.json:
        Path(args.json).write_text(json.dumps(recs, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(recs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
