#!/usr/bin/env python
"""Terminal atoms of the PDE and of the particles, matched: ReLU perceptron from uniform data, ascent and
descent, circle and sphere, two values of beta.

For each case the PDE runs from uniform data with its default options — the Eulerian solver, then the
Lagrangian continuation once the grid cannot follow the concentration — until its nodes are stationary
(or T_FINAL), and its terminal atoms come with the error estimate of the rerun at twice the nodes. The
particles (N i.i.d. uniform, the paper's protocol: explicit Euler, dt = 0.1, its stopping rule: cluster
count unchanged over 5 snapshots and max drift <= 5e-4) run to convergence. Both end states are then
compared with :func:`solvers.comparison.terminal_atoms`: the particle mass within 0.05 rad of each PDE atom
(mass >= 0.01), and the single-linkage clusters (the paper's radius min(0.5 / sqrt(beta), pi / (2 d))) of
the particles outside all those caps: atoms of the particles that the PDE does not have. Also printed: the mass in the dead zone (every ReLU
unit inactive) at t = 0 and at the end for both solvers (frozen in descent, as the main paper reports),
and the PDE's diffuse mass.

A case MATCHes when every PDE atom of mass >= MASS_TOL = 0.02 holds the particles' mass within 0.05 rad to
within MASS_TOL, and no cluster of the particles outside the caps weighs MASS_TOL or more. Where they
differ, the finite-N particles ended in another atomic state than the mean field: the table says so.

The perceptron is Perceptron.random(d, d, "relu", 1.0, seed=111); on the sphere its dead zone holds only
1e-4 of the mass, so two more sphere-descent cases use the next seed, 112 (dead zone 0.133 of the mass).

    scripts/studies/atoms_study.py [--n N] [--cases circle-ascent-1,...] [--json out.json]
                           [--workers W | --scheduler ADDRESS]

The cases are independent tasks (solvers.app.executor): one local process by default, ``--workers W``
local processes, or the workers of a running Dask cluster with ``--scheduler`` (docs/cluster.md). Every case is seeded, so its row does not depend on where it ran.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from solvers import Model, Perceptron, simulate_particles, solve_pde  # noqa: E402
from solvers.comparison import terminal_atoms  # noqa: E402
from solvers.particles import cluster_radius  # noqa: E402

PERCEPTRON_SEED = 111
MASS_TOL = 0.02
CAP = 0.05
T_FINAL = {2: 2000.0, 3: 400.0}
STOP = {"window": 5, "drift_tol": 5e-4, "scale": 0.5}
#: name -> (d, flow, beta, particles N[, perceptron seed, default 111])
CASES = {
    "circle-ascent-1": (2, "ascent", 1.0, 10_000),
    "circle-ascent-4": (2, "ascent", 4.0, 10_000),
    "circle-descent-1": (2, "descent", 1.0, 10_000),
    "circle-descent-4": (2, "descent", 4.0, 10_000),
    "sphere-ascent-1": (3, "ascent", 1.0, 10_000),
    "sphere-ascent-9": (3, "ascent", 9.0, 10_000),
    "sphere-descent-1": (3, "descent", 1.0, 10_000),
    "sphere-descent-9": (3, "descent", 9.0, 10_000),
    # the next perceptron seed, 112, whose dead zone holds 0.133 of the mass: frozen mass on the sphere
    "sphere-descent-1-seed112": (3, "descent", 1.0, 10_000, 112),
    "sphere-descent-9-seed112": (3, "descent", 9.0, 10_000, 112),
}


def dead_mass_pde(pde, i: int, perceptron) -> float:
    """Mass of snapshot i in the dead zone: of the node measure past the handoff, else by quadrature."""
    nodes = pde.node_measure(i)
    if nodes is not None:
        return float(nodes.w[_dead(nodes.x, perceptron)].sum())
    pts, wts, rho = pde.space.quadrature(pde.coefficients(i))
    return float((rho * wts)[_dead(pts, perceptron)].sum())


def _dead(x: np.ndarray, perceptron) -> np.ndarray:
    pre = x @ perceptron.a.T + (perceptron.b if perceptron.b is not None else 0.0)
    return np.all(pre <= 0.0, axis=1)


def run_case(name: str, n: int | None = None, seed: int = 3) -> dict:
    d, flow, beta, n_default, pseed = (CASES[name] + (PERCEPTRON_SEED,))[:5]
    n = n_default if n is None else n
    perceptron = Perceptron.random(d, d, "relu", 1.0, seed=pseed)
    model = Model(d, beta, flow, perceptron=perceptron)
    t0 = time.perf_counter()
    pde = solve_pde(model, T_FINAL[d], 64 if d == 2 else 16, save_every=T_FINAL[d] / 20)
    wall_pde = time.perf_counter() - t0
    t0 = time.perf_counter()
    parts = simulate_particles(model, n, integrator="euler", dt=0.1, stop=STOP, seed=seed, max_steps=200_000)
    wall_particles = time.perf_counter() - t0
    atoms = pde.atoms()
    cmp = terminal_atoms(atoms, parts.x[-1], parts.w, cluster_radius(beta, d, STOP["scale"]), cap=CAP,
                         min_mass=0.01)
    heavy = [k for k, m in enumerate(cmp["pde_masses"]) if m >= MASS_TOL]
    mass_diff = [abs(cmp["cap_masses"][k] - cmp["pde_masses"][k]) for k in heavy]
    extra = [m for _, m in cmp["outside"] if m >= MASS_TOL]
    errs = atoms.mass_errors if atoms.mass_errors is not None else np.full(len(atoms), np.nan)
    row = {
        "case": name, "d": d, "flow": flow, "beta": beta, "n": n, "perceptron_seed": pseed,
        "pde_stop": pde.stop_reason, "pde_t_stop": float(pde.t_stop), "t_handoff": pde.t_handoff,
        "pde_masses": cmp["pde_masses"], "pde_mass_errors": [float(e) for e, m in zip(errs, atoms.masses) if m >= 0.01],
        "pde_diffuse": atoms.diffuse, "particle_stop": parts.stop_reason, "particle_t_stop": float(parts.t_stop),
        "particle_cap_masses": cmp["cap_masses"],
        "particle_clusters": sorted((m for _, m in cmp["outside"]), reverse=True),
        "paired": [(p["pde_mass"], p["particle_mass"], p["position_error"]) for p in cmp["pairs"]],
        "max_mass_difference": max(mass_diff, default=float("nan")), "extra_particle_clusters": extra,
        "dead_pde": [dead_mass_pde(pde, 0, perceptron), dead_mass_pde(pde, -1, perceptron)],
        "dead_particles": [float(parts.w[_dead(parts.x[0], perceptron)].sum()),
                           float(parts.w[_dead(parts.x[-1], perceptron)].sum())],
        "wall_pde": wall_pde, "wall_particles": wall_particles,
    }
    row["match"] = bool(heavy and max(mass_diff) <= MASS_TOL and not extra)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, help="particles for every case (default 1e4)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json", help="write the rows as JSON")
    ap.add_argument("--workers", type=int, default=1, help="local processes (default 1: one case at a time)")
    ap.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the cases on a running Dask cluster (tcp://HOST:PORT or a scheduler file)")
    args = ap.parse_args(argv)
    from solvers.app.executor import SchedulerError, open_pool

    names = args.cases.split(",")
    for name in names:
        if name not in CASES:
            print(f"unknown case {name!r}; known: {', '.join(CASES)}", file=sys.stderr)
            return 2
    if args.workers < 1:
        print("--workers must be >= 1", file=sys.stderr)
        return 2
    try:
        pool = open_pool(args.workers, args.scheduler)
    except SchedulerError as e:
        print(e, file=sys.stderr)
        return 2
    rows = [None] * len(names)
    with pool:
        futs = [pool.submit(run_case, name, args.n) for name in names]
        for i, r in pool.results(futs):
            rows[i] = r
            atoms = ", ".join(f"{m:.4f}±{e:.1e}" for m, e in zip(r["pde_masses"], r["pde_mass_errors"])) or "none"
            if r["match"]:
                verdict = "MATCH"
            elif r["extra_particle_clusters"]:
                verdict = "the particles end in another atomic state (clusters the PDE does not have)"
            else:
                verdict = "the particles put other masses at the PDE's atoms"
            print(f"{r['case']:>24s}: PDE {r['pde_stop']} at t={r['pde_t_stop']:.4g} (handoff t={r['t_handoff']}); atoms "
                  f"{atoms}, diffuse {r['pde_diffuse']:.4f} | particles (N={r['n']}, Euler 0.1) {r['particle_stop']} at "
                  f"t={r['particle_t_stop']:.4g}: mass within {CAP} rad of each atom "
                  f"{', '.join(f'{m:.4f}' for m in r['particle_cap_masses'])}; clusters without an atom "
                  f"{np.round(r['particle_clusters'], 4).tolist()} | max |dm| {r['max_mass_difference']:.4f} | dead-zone "
                  f"mass PDE {r['dead_pde'][0]:.4f}->{r['dead_pde'][1]:.4f} particles {r['dead_particles'][0]:.4f}->"
                  f"{r['dead_particles'][1]:.4f} | perceptron seed {r['perceptron_seed']} | {verdict} "
                  f"[{r['wall_pde']:.0f}+{r['wall_particles']:.0f} s]", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
