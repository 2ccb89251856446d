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

A case MATCHes when every heavy atom (mass >= MASS_TOL = 0.02, in either measure) is paired one to one
with an atom of the other measure within the PDE grid spacing, with masses within 0.02. The heavy
threshold is the mass tolerance itself: a piece lighter than 0.02 is, at that tolerance, not
distinguishable from no atom at all, and pieces that light are detection-threshold events (sphere
ascent, below). The light pieces (0.01 <= mass < 0.02) are still found, matched and printed.
The perceptron is Perceptron.random(d, d, "relu", 1.0, seed=111); on the sphere its dead zone holds only
1e-4 of the mass, so two more sphere-descent cases use the next seed, 112 (dead zone 0.133 of the mass).

Why the circle runs use an explicit filter: where a ReLU unit switches off, the drift has a kink and the
density a jump (the active side compresses against, or empties away from, the dead-zone boundary), and
the jump grows like exp(|c_k| t). Unfiltered, its Gibbs oscillations fill the spectral tail and, in
descent, the PDE stops on ``resolution`` at t ~ 1 (K = 4096), before any atom has formed. The
exponential filter (alpha = 36, order 16: the top mode damped by e^-36 = 2e-16, the lower half of the
spectrum by at most 5.5e-4) is an explicit, recorded option (``PDEResult.options["filter"]``); the run then goes on until the atoms are
narrower than the grid and stops on ``positivity`` (min rho < -0.1 max rho). The sphere runs use the
same filter (it lets sphere descent at beta = 1 form both of its atoms before the cap); sphere ascent
is not matched at beta = 9: see the comment on CASES.

    scripts/atoms_study.py [--n N] [--cases circle-ascent-1,...] [--json out.json]
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

PERCEPTRON_SEED = 111
MASS_TOL = 0.02  # also the heavy-atom threshold: see the module docstring
FILTER = {"kind": "exponential", "alpha": 36.0, "order": 16}
_CIRCLE = dict(degree=128, max_degree=4096, tail_max=1e-2, positivity_tol=0.1, filter=FILTER)
_SPHERE = dict(degree=31, max_degree=255, tail_max=1e-2, positivity_tol=0.1, filter=FILTER)
#: name -> (d, flow, beta, PDE options, particles N, snapshot interval[, perceptron seed, default 111]).
#: Sphere ascent reaches the resolution cap early. Units with c_k < 0 first compress the mass onto the
#: great circles where they switch off (the density concentrates on curves, with a jump), and the cap
#: is reached in that stage (L = 255: t = 1.48 at beta = 1, 1.52 at beta = 9; L = 511 in 220 s: t = 1.94
#: at beta = 1), when 4-15 % of the mass sits in atoms and the rest along filaments. At beta = 9 the
#: filaments' smoothed density reaches the atom threshold at t = 1.5, just before the stop: both
#: measures then show light pieces (0.016-0.018) along them, 2 in the PDE and 3 in the particles at
#: N = 1e5 (more at N = 2e4, sampling noise cutting the filaments), while the one heavy atom (0.06)
#: matches within 9e-4 rad.
CASES = {
    "circle-ascent-1": (2, "ascent", 1.0, _CIRCLE, 100_000, 0.1),
    "circle-ascent-4": (2, "ascent", 4.0, _CIRCLE, 100_000, 0.1),
    "circle-descent-1": (2, "descent", 1.0, _CIRCLE, 100_000, 0.1),
    "circle-descent-4": (2, "descent", 4.0, _CIRCLE, 100_000, 0.1),
    "sphere-ascent-1": (3, "ascent", 1.0, _SPHERE, 100_000, 0.25),
    "sphere-ascent-9": (3, "ascent", 9.0, _SPHERE, 100_000, 0.25),
    "sphere-descent-1": (3, "descent", 1.0, _SPHERE, 100_000, 0.25),
    "sphere-descent-9": (3, "descent", 9.0, _SPHERE, 100_000, 0.25),
    # the next perceptron seed, 112, whose dead zone holds 0.133 of the mass: frozen mass on the sphere
    "sphere-descent-1-seed112": (3, "descent", 1.0, _SPHERE, 100_000, 0.25, 112),
    "sphere-descent-9-seed112": (3, "descent", 9.0, _SPHERE, 100_000, 0.25, 112),
}


def dead_mass_pde(pde, i: int, perceptron) -> float:
    pts, wts, rho = pde.space.quadrature(pde.coefficients(i))
    return float((rho * wts)[_dead(pts, perceptron)].sum())


def _dead(x: np.ndarray, perceptron) -> np.ndarray:
    pre = x @ perceptron.a.T + (perceptron.b if perceptron.b is not None else 0.0)
    return np.all(pre <= 0.0, axis=1)


def run_case(name: str, n: int | None = None, seed: int = 3) -> dict:
    d, flow, beta, popts, n_default, save, pseed = (CASES[name] + (PERCEPTRON_SEED,))[:7]
    n = n_default if n is None else n
    popts = dict(popts)
    degree = popts.pop("degree")
    perceptron = Perceptron.random(d, d, "relu", 1.0, seed=pseed)
    model = Model(d, beta, flow, perceptron=perceptron)
    t0 = time.perf_counter()
    pde = solve_pde(model, 30.0, degree, save_every=save, **popts)
    wall_pde = time.perf_counter() - t0
    t_end = math.floor(pde.t_stop / save + 1e-9) * save
    t0 = time.perf_counter()
    parts = simulate_particles(model, n, t_final=t_end, integrator="rk4", dt=0.01, save_every=save, seed=seed)
    wall_particles = time.perf_counter() - t0
    cmp = compare(pde, parts)
    i_end = int(np.argmin(np.abs(pde.t - t_end)))
    deg = int(pde.degree[i_end])
    spacing = 2 * math.pi / deg if d == 2 else math.pi / (deg + 1)
    pairs = cmp.matched_atoms
    row = {
        "case": name, "d": d, "flow": flow, "beta": beta, "n": n, "filter": popts.get("filter"), "perceptron_seed": pseed,
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
    heavy, heavy_up, heavy_uq = cmp.heavy_atoms(MASS_TOL)
    row.update({
        "heavy_pairs": len(heavy),
        "heavy_unmatched_pde": len(heavy_up),
        "heavy_unmatched_particles": len(heavy_uq),
        "heavy_max_position_error": max((p["position_error"] for p in heavy), default=float("nan")),
        "heavy_max_mass_difference": max((abs(p["mass_difference"]) for p in heavy), default=float("nan")),
    })
    row["match"] = bool(row["heavy_pairs"] > 0 and row["heavy_unmatched_pde"] == 0
                        and row["heavy_unmatched_particles"] == 0
                        and row["heavy_max_position_error"] <= spacing
                        and row["heavy_max_mass_difference"] <= MASS_TOL)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, help="particles for every case (default 1e5)")
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
        verdict = ("MATCH" if r["match"] else "no atoms in either" if r["pde_atoms"] == r["particle_atoms"] == 0
                   else "no match")
        print(f"{r['case']:>17s}: PDE {r['pde_stop']} at t={r['pde_t_stop']:.3f} (L/K={r['degree']}); compared at "
              f"t={r['t_compare']:.2f}: atoms PDE {r['pde_atoms']} particles {r['particle_atoms']} matched "
              f"{r['matched']}; max pos err {r['max_position_error']:.2e} (grid {r['grid_spacing']:.2e}); "
              f"max |dm| {r['max_mass_difference']:.4f}; heavy (>= {MASS_TOL}): {r['heavy_pairs']} pairs, "
              f"unmatched PDE {r['heavy_unmatched_pde']} particles {r['heavy_unmatched_particles']}, "
              f"max pos err {r['heavy_max_position_error']:.2e}, max |dm| {r['heavy_max_mass_difference']:.4f}; "
              f"masses PDE {np.round(r['pde_masses'], 4).tolist()} "
              f"particles {np.round(r['particle_masses'], 4).tolist()}; dead-zone mass PDE "
              f"{r['dead_pde'][0]:.4f}->{r['dead_pde'][1]:.4f} particles {r['dead_particles'][0]:.4f}->"
              f"{r['dead_particles'][1]:.4f}; N={r['n']}, perceptron seed {r['perceptron_seed']}, "
              f"filter {'on' if r['filter'] else 'off'}; "
              f"{verdict} "
              f"[{r['wall_pde']:.0f}+{r['wall_particles']:.0f} s]", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
