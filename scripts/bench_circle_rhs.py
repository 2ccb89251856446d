#!/usr/bin/env python3
"""Cost of one right-hand side of the circle PDE against the bare FFTs it needs.

For each K the RHS executes one batched inverse real FFT (rows: rho and G, plus Psi for SA) and one
forward real FFT (the flux) of length M >= 3K. The floor is those same planned pyFFTW transforms,
executed alone in the same run; the ratio RHS / floor measures everything else (multipliers,
velocity, flux). Best of several repeats, each timing a loop long enough to be above timer noise.

    python scripts/bench_circle_rhs.py [--K 256 4096 65536] [--attention unnormalized]

``records(Ks, attentions)`` returns records {case, seconds, floor_seconds, ratio, target, met} (plus
"transforms"); ratio = RHS / floor; ``met`` is None where no target applies (K other than 4096).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


from solvers import Model, Perceptron  # noqa: E402
from solvers.pde_circle import CircleDiscretization  # noqa: E402

TARGET_K, TARGET_RATIO = 4096, 2.0


def best_time(fn, min_time: float = 0.05, repeats: int = 7) -> float:
    """Best per-call time of fn over ``repeats`` loops of at least ``min_time`` seconds each."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time:
            break
        n *= 2
    best = dt / n
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def measure(K: int, attention: str = "unnormalized", beta: float = 25.0, min_time: float = 0.05,
            repeats: int = 7) -> dict:
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, beta, "ascent", attention=attention, perceptron=p)
    disc = CircleDiscretization(model, K)
    rng = np.random.default_rng(0)
    c = (rng.standard_normal(K) + 1j * rng.standard_normal(K)) / (1 + np.arange(K)) ** 2
    c[0] = 1.0
    rhs = best_time(lambda: disc.rhs(0.0, c, False), min_time, repeats)
    inv, fwd = disc._inv, disc._fwd

    def floor():
        inv.execute()
        fwd.execute()

    fl = best_time(floor, min_time, repeats)
    ratio = rhs / fl
    case = f"circle PDE RHS K={K} ({attention})"
    target = f"<= {TARGET_RATIO:g}x FFT floor" if K == TARGET_K else "none (reported)"
    return {"case": case, "seconds": rhs, "floor_seconds": fl, "ratio": ratio, "target": target,
            "met": bool(ratio <= TARGET_RATIO) if K == TARGET_K else None,
            "transforms": f"{inv.nfields} inverse + {fwd.nfields} forward, M = {disc.basis.M}"}


def records(Ks=(256, 4096, 65536), attentions=("unnormalized", "normalized"), min_time: float = 0.05,
            repeats: int = 7) -> list[dict]:
    return [measure(K, a, min_time=min_time, repeats=repeats) for a in attentions for K in Ks]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, nargs="+", default=[256, 4096, 65536])
    ap.add_argument("--attention", nargs="+", default=["unnormalized", "normalized"])
    args = ap.parse_args(argv)
    print(f"{'case':44s} {'RHS [us]':>10s} {'floor [us]':>11s} {'ratio':>6s}  transforms")
    for r in records(args.K, args.attention):
        print(f"{r['case']:44s} {1e6 * r['seconds']:10.1f} {1e6 * r['floor_seconds']:11.1f} "
              f"{r['ratio']:6.2f}  {r['transforms']}  [{r['target']}{': MISSED' if r['met'] is False else ''}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
