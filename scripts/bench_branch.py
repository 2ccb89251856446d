#!/usr/bin/env python3
"""Stationary states with noise and their branches (solvers.stationary): three timings against their targets.

    S^1 branch   a 200-point branch (100 per side) of mode 1 at K = 64 modes, beta = 3 (subcritical: a fold and a
                 transition located); target <= 5 s. Floor: 200 times one correction step at that size (one
                 evaluation of the fixed-point map and one solve of the bordered system), timed in the same run.
    S^2 zonal    the same on S^2 at L = 64, zonal representation; target <= 10 s; floor as above.
    S^2 general  one general stationary state at L = 31 (a GeLU perceptron breaks every symmetry; Newton–Krylov
                 from the uniform state) with its 8 leading eigenvalues; target <= 30 s. Floor: the right-hand
                 sides of the PDE the eigenvalues need (two per column of the dense Jacobian, (L + 1)^2 - 1
                 columns, one timed in the same run), the part no method of this kind avoids.

    .venv/bin/python scripts/bench_branch.py [--quick] [--repeats 3]

``records(quick, repeats)`` returns records {case, seconds, floor_seconds, ratio, target, met} (plus details)
for scripts/bench.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from solvers import Model, Perceptron
from solvers import branches, stationary as st
from solvers.stationary_problems import _problem


def _best(fn, repeats: int) -> tuple[float, object]:
    out, best = None, float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _correction_floor(branch, repeats: int) -> float:
    """One correction step at a mid-branch point: an evaluation of the fixed-point map and a bordered solve."""
    p = _problem(branch.model, branch.degree, branch.representation)
    i = len(branch.noise) // 3
    x, nu, t = branch.unknowns[i], float(branch.noise[i]), branch.tangents[i]
    rhs = np.zeros(p.n + 1)

    def one():
        ev = p.evaluate(x, nu)
        p.bordered(ev, branch.nu_ref, t, rhs)
    one()
    best = float("inf")
    for _ in range(max(repeats, 5) * 10):
        t0 = time.perf_counter()
        one()
        best = min(best, time.perf_counter() - t0)
    return best


def _branch_record(d: int, degree: int, points: int, target: float | None, repeats: int) -> dict:
    m = Model(d, 3.0, "ascent")
    nu1 = m.energy_multipliers(1)[1]
    # steps bounded so that each side spends its points inside the range (S^1 reaches its end sooner)
    kw = dict(noise_range=(0.3 * nu1, 1.2 * nu1), max_points=points // 2, max_step=0.02 if d == 2 else 0.05)
    seconds, b = _best(lambda: branches.branch_from_uniform(m, 1, degree, **kw), repeats)
    floor = len(b.noise) * _correction_floor(b, repeats)
    name = "S^1" if d == 2 else "S^2 zonal"
    fold = f"fold nu = {b.folds[0]['nu']:.10g}" if b.folds else "no fold in range"
    return {"case": f"{name} branch of mode 1, {len(b.noise)} points, degree {degree}, beta = 3",
            "seconds": seconds, "floor_seconds": floor, "ratio": seconds / floor,
            "target": f"<= {target:g} s" if target else "none (quick mode)",
            "met": None if target is None else bool(seconds <= target), "points": int(len(b.noise)),
            "note": f"{b.kind}, threshold {b.threshold:.10g}, {fold}, transition {b.transition}; floor = points x one "
                    f"correction step ({floor / len(b.noise) * 1e3:.3f} ms: the fixed-point map and the bordered "
                    f"solve, n = {b.unknowns.shape[1]} unknowns); best of {repeats}"}


def _general_record(L: int, target: float | None, repeats: int) -> dict:
    p = Perceptron.random(3, 3, "gelu", 0.3, seed=4)
    m = Model(3, 4.0, "ascent", perceptron=p, noise=0.1)
    seconds, s = _best(lambda: st.stationary_state(m, L, representation="general"), repeats)
    newton, _ = _best(lambda: st.stationary_state(m, L, representation="general", eigenvalues=0), repeats)
    from solvers.pde_sphere import SphereDiscretization
    disc = SphereDiscretization(m, L)
    u = disc.space.to_state(s.coeffs, L)
    per_rhs, _ = _best(lambda: [disc.rhs(0.0, u) for _ in range(20)], max(repeats, 3))
    columns = (L + 1) ** 2 - 1
    floor = 2 * columns * per_rhs / 20
    return {"case": f"S^2 general stationary state, L = {L}, GeLU perceptron, 8 leading eigenvalues",
            "seconds": seconds, "floor_seconds": floor, "ratio": seconds / floor,
            "target": f"<= {target:g} s" if target else "none (quick mode)",
            "met": None if target is None else bool(seconds <= target),
            "newton_seconds": newton, "unknowns": int(st._problem(m, L, "general").n),
            "note": f"{s.message}, residual {s.residual:.1e}, leading eigenvalue {s.eigenvalues[0]:+.4g}; Newton "
                    f"(Krylov) alone {newton:.3f} s; floor = the {2 * columns} PDE right-hand sides of the dense "
                    f"Jacobian ({per_rhs / 20 * 1e3:.3f} ms each); best of {repeats}"}


def records(quick: bool = False, repeats: int = 3) -> list[dict]:
    if quick:
        return [_branch_record(2, 16, 20, None, 1), _branch_record(3, 16, 20, None, 1), _general_record(8, None, 1)]
    return [_branch_record(2, 64, 200, 5.0, repeats), _branch_record(3, 64, 200, 10.0, repeats),
            _general_record(31, 30.0, repeats)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for r in records(args.quick, args.repeats):
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1f}"
        print(f"{r['case']}: {r['seconds']:.3f} s (floor {r['floor_seconds']:.3f} s, ratio {ratio}; target "
              f"{r['target']}{'' if r['met'] is None else ', met' if r['met'] else ', MISSED'})\n    {r['note']}")


if __name__ == "__main__":
    main()
