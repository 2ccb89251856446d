#!/usr/bin/env python
"""The NUFFT interaction sums (S^1 and S^2) against the direct sums: the largest errors in Psi and G.

For each beta, N weighted sources on S^{d-1} (half of them in a tight cap: a field with a large dynamic
range; or uniform with ``--uniform``), the fields of ``InteractionSums(d, beta, "nufft")`` at the sources
and at 300 other points (poles included on S^2) against ``direct_fields`` there. Printed per row: the
largest error in Psi and in G relative to max Psi, and in G relative to max |G| (the three numbers the
tests bound by 1e-10).

    scripts/studies/sums_accuracy.py [--betas 0,1,4,9,25,100] [--n 2000] [--uniform] [--check 300]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from solvers.interaction import InteractionSums, direct_fields  # noqa: E402


def points(n: int, d: int, seed: int, clustered: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if clustered:
        x[: n // 2] = x[0] + 0.05 * rng.standard_normal((n // 2, d))
    if d == 3 and n >= 3:                      # the poles, where phi is undefined
        x[1], x[2] = (0.0, 0.0, 1.0), (-0.0, 0.0, -1.0)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def errors(d: int, beta: float, n: int, clustered: bool, check: int) -> list[tuple[str, float, float, float]]:
    y = points(n, d, 1, clustered)
    w = np.random.default_rng(2).uniform(0.2, 1.0, n)
    w /= w.sum()
    sums = InteractionSums(d, beta, "nufft")
    out = []
    for where, x in (("sources", None), ("other points", points(check, d, 3, False))):
        psi, G = sums.fields(y, w, x)
        xe = y[:check] if x is None else x
        psi, G = psi[:check], G[:check]
        psi_d, G_d = direct_fields(xe, y, w, beta)
        scale = np.abs(psi_d).max()
        eG = np.abs(G - G_d).max()
        out.append((where, np.abs(psi - psi_d).max() / scale, eG / scale, eG / np.abs(G_d).max()))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--betas", default="0,1,4,9,25,100")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--uniform", action="store_true", help="uniform sources (default: half in a cap)")
    p.add_argument("--check", type=int, default=300, help="points compared with the direct sums")
    a = p.parse_args()
    print(f"N = {a.n} {'uniform' if a.uniform else 'clustered'} sources; errors against the direct sums at "
          f"{a.check} points")
    print(f"{'':4s} {'beta':>6s}  {'where':12s}  {'Psi/maxPsi':>10s}  {'G/maxPsi':>10s}  {'G/max|G|':>10s}")
    for d in (2, 3):
        for beta in (float(b) for b in a.betas.split(",")):
            for where, e_psi, e_G, e_G_own in errors(d, beta, a.n, not a.uniform, a.check):
                print(f"S^{d - 1}  {beta:6g}  {where:12s}  {e_psi:10.1e}  {e_G:10.1e}  {e_G_own:10.1e}", flush=True)


if __name__ == "__main__":
    main()
