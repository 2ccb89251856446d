#!/usr/bin/env python
"""Atoms of the PDE and of the particles, matched: ReLU perceptron from uniform data, ascent and
descent, circle and sphere, two values of beta (issue "validating the particle limit").

For each case the PDE runs from uniform data until it stops (at its resolution limit when it
concentrates), the particles (N i.i.d. uniform, RK4) run to the PDE's last snapshot on the common
save grid, and :func:`solvers.compare` matches the atoms of both measures found by one procedure
(heat-kernel smoothing at scale h, super-level set {rho_h >= threshold}, mass within atom_radius).
Printed per case: stop reason and time of the PDE, atoms of each, the largest position error against
the PDE grid spacing, the largest mass difference, and the mass in the dead zone (every ReLU unit
inactive) at t = 0 and at the end for both solvers (frozen in descent, as the main paper reports).

    scripts/atoms_study.py [--n 20000] [--cases circle-ascent-1,...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from solvers import Model, Perceptron, compare, simulate_particles, solve_pde  # noqa: E402

SAVE = 0.25
CASES = {
    # name: (d, flow, beta, pde options)
    "circle-ascent-1": (2, "ascent", 1.0, dict(degree=128, max_degree=4096, tail_max=1e-2)),
    "circle-ascent-4": (2, "ascent", 4.0, dict(degree=128, max_degree=4096, tail_max=1e-2)),
    "circle-descent-1": (2, "descent", 1.0, dict(degree=128, max_degree=4096, tail_max=1e-2)),
    "circle-descent-4": (2, "descent", 4.0, dict(degree=128, max_degree=4096, tail_max=1e-2)),
    "sphere-ascent-1": (3, "ascent", 1.0, dict(degree=31, max_degree=255, tail_max=1e-2, positivity_tol=0.1)),
    "sphere-ascent-9": (3, "ascent", 9.0, dict(degree=31, max_degree=255, tail_max=1e-2, positivity_tol=0.1)),
    "sphere-descent-1": (3, "descent", 1.0, dict(degree=31, max_degree=255, tail_max=1e-2, positivity_tol=0.1)),
    "sphere-descent-9": (3, "descent", 9.0, dict(degree=31, max_degree=255, tail_max=1e-2, positivity_tol=0.1)),
}


def dead_mass_pde(pde, i: int, perceptron) -> float:
    pts, wts, rho = pde.space.quadrature(pde.coefficients(i))
    return float((rho * wts)[_dead(pts, perceptron)].sum())


def _dead(x: np.ndarray, perceptron) -> np.ndarray:
    pre = x @ perceptron.a.T + (perceptron.b if perceptron.b is not None else 0.0)
    return np.all(pre <= 0.0, axis=1)


def run_case(name: str, n: int, seed: int = 3) -> dict:
    d, flow, beta, popts = CASES[name]
    popts = dict(popts)
    degree = popts.pop("degree")
    perceptron = Perceptron.random(d, d, "relu", 1.0, seed=111)
    model = Model(d, beta, flow, perceptron=perceptron)
    t0 = time.perf_counter()
    pde = solve_pde(model, 30.0, degree, save_every=SAVE, **popts)
    wall_pde = time.perf_counter() - t0
    t_end = math.floor(pde.t_stop / SAVE + 1e-9) * SAVE
    t0 = time.perf_counter()
    parts = simulate_particles(model, n, t_final=t_end, integrator="rk4", dt=0.01, save_every=SAVE, seed=seed)
    wall_particles = time.perf_counter() - t0
    cmp = compare(pde, parts)
    i_end = int(np.argmin(np.abs(pde.t - t_end)))
    deg = int(pde.degree[i_end])
    spacing = 2 * math.pi / deg if d == 2 else math.pi / (deg + 1)
    pairs = cmp.matched_atoms
    row = {
        "case": name, "d": d, "flow": flow, "beta": beta, "n": n,
        "pde_stop": pde.stop_reason, "pde_t_stop": float(pde.t_stop), "t_compare": float(t_end), "degree": deg,
        "grid_spacing": spacing, "atom_radius": cmp.options["atom_radius"], "smoothing": cmp.options["smoothing"],
        "pde_atoms": len(pairs) + len(cmp.unmatched_pde), "particle_atoms": len(pairs) + len(cmp.unmatched_particles),
        "matched": len(pairs),
        "max_position_error": max((p["position_error"] for p in pairs), default=float("nan")),
        "max_mass_difference": max((abs(p["mass_difference"]) for p in pairs), default=float("nan")),
        "pde_masses": [p["pde_mass"] for p in pairs] + [m for _, m in cmp.unmatched_pde],
        "particle_masses": [p["particle_mass"] for p in pairs] + [m for _, m in cmp.unmatched_particles],
        "dead_pde": [dead_mass_pde(pde, 0, perceptron), dead_mass_pde(pde, i_end, perceptron)],
        "dead_particles": [float(parts.w[_dead(parts.x[0], perceptron)].sum()),
                           float(parts.w[_dead(parts.x[-1], perceptron)].sum())],
        "mmd": float(cmp.mmd[-1]), "wall_pde": wall_pde, "wall_particles": wall_particles,
    }
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json", help="write the rows as JSON")
    args = ap.parse_args(argv)
    rows = []
    for name in args.cases.split(","):
        if name not in CASES:
            print(f"unknown case {name!r}; known: {', '.join(CASES)}", file=sys.stderr)
            return 2
        r = run_case(name, args.n)
        rows.append(r)
        ok = (r["pde_atoms"] == r["particle_atoms"] == r["matched"] and r["matched"] > 0
              and r["max_position_error"] <= r["grid_spacing"] and r["max_mass_difference"] <= 0.02)
        print(f"{r['case']:>17s}: PDE {r['pde_stop']} at t={r['pde_t_stop']:.3f} (L/K={r['degree']}); compared at "
              f"t={r['t_compare']:.2f}: atoms PDE {r['pde_atoms']} particles {r['particle_atoms']} matched "
              f"{r['matched']}; max pos err {r['max_position_error']:.2e} (grid {r['grid_spacing']:.2e}); "
              f"max |dm| {r['max_mass_difference']:.4f}; masses PDE {np.round(r['pde_masses'], 4).tolist()} "
              f"particles {np.round(r['particle_masses'], 4).tolist()}; dead-zone mass PDE "
              f"{r['dead_pde'][0]:.4f}->{r['dead_pde'][1]:.4f} particles {r['dead_particles'][0]:.4f}->"
              f"{r['dead_particles'][1]:.4f}; {'MATCH' if ok else 'no match'} "
              f"[{r['wall_pde']:.0f}+{r['wall_particles']:.0f} s]", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
