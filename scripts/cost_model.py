#!/usr/bin/env python
"""Measure the interaction sums' costs on this machine and set them beside ``method="auto"``'s pick.

``InteractionSums(d, beta, method).fields(y, w)`` (d = 2 by default, ``--d 3`` for S^2; uniformly random
points; the evaluation points are the sources, as in the particle solver and the continuation) is timed
for every method at every (beta, N) of the grid, one thread, best of ``--repeats`` loops of >=
``--min-time`` seconds each (CPU time of the thread). Printed: the times, the method the cost model picks (``method_for``) and the
fastest measured, and how much slower the pick is than the fastest. With
``--fit`` the linear models of the code are fitted to the times (relative least squares), S^1:

    direct a_direct + b_direct (d + 6) n_src n_eval
    fast   a_fast + (b_fast (K + 1) + c_fast) (n_src + n_eval)
    nufft  a_nufft + b_nufft (n_src + n_eval)

and S^2 (the sums at their sources, n points; nlm = (L + 1)(L + 2) / 2; the NUFFT makes one adjoint and two
syntheses per chunk of ``sphere_nufft_chunk(L)`` points; the series' coefficients are timed alone too, to
part their cost per source from that per evaluation point):

    direct as on S^1
    fast   a_fast + nlm (b_src n_src + b_eval n_eval)
    nufft  b_nufft 3 n + chunks (a_nufft + c_nufft L^2)

The code's constants are these divided by b_direct / 1e-9 (the unit of ``_C_DIRECT``).

    scripts/cost_model.py [--d 2|3] [--betas 1,5,25,100] [--sizes 100,1000,...] [--fit] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from solvers.interaction import InteractionSums, sphere_nufft_chunk  # noqa: E402

METHODS = {2: ("direct", "fast", "nufft"), 3: ("direct", "fast", "nufft")}
DIRECT_MAX = 3000          #: the direct sums beyond this many points are never the cheapest (O(N^2))


def best_time(fn, min_time: float, repeats: int) -> float:
    """Best per-call seconds of ``fn`` over ``repeats`` loops of at least ``min_time`` seconds, in CPU time of
    the calling thread (every method runs on one thread here): what the other helpers of a busy machine take
    from the wall clock does not count."""
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-7)
    n = max(1, int(min_time / once))
    best = np.inf
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best


def measure(betas, sizes, min_time: float, repeats: int, seed: int = 0, d: int = 2) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for beta in betas:
        sums = {m: InteractionSums(d, beta, m, nufft_threads=1) for m in METHODS[d]}
        K = sums["fast"].fast.K if d == 2 else sums["fast"].fast.L
        for N in sizes:
            y = rng.standard_normal((N, d))
            y /= np.linalg.norm(y, axis=1, keepdims=True)
            w = np.full(N, 1.0 / N)
            t = {m: best_time(lambda s=s: s.fields(y, w), min_time, repeats)
                 for m, s in sums.items() if m != "direct" or N <= DIRECT_MAX}
            if d == 3:
                coef = best_time(lambda: sums["fast"].fast.coefficients(y, w), min_time, repeats)
            pick = InteractionSums(d, beta).method_for(N)
            fastest = min(t, key=t.get)
            rows.append({"beta": beta, "K": K, "N": N, "seconds": t, "auto": pick, "fastest": fastest,
                         "auto_over_fastest": t[pick] / t[fastest] if pick in t else None})
            if d == 3:
                rows[-1]["fast_coefficients"] = coef
            times = "  ".join(f"{m} {1e6 * v:9.1f} us" for m, v in t.items())
            print(f"beta {beta:6g} {'K' if d == 2 else 'L'} {K:3d} N {N:7d}  " + times
                  + f"  auto {pick:6s} fastest {fastest:6s}"
                  + (f"  auto/fastest {t[pick] / t[fastest]:.2f}" if pick in t else ""), flush=True)
    return rows


def _fit(A: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Least squares of A c = t relative to t (each row divided by its t)."""
    return np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)[0]


def fit(rows: list[dict], d: int = 2) -> dict:
    out = {}
    dr = [r for r in rows if "direct" in r["seconds"]]
    if dr:
        pairs = np.array([(d + 6.0) * r["N"] * r["N"] for r in dr])
        a, b = _fit(np.stack([np.ones_like(pairs), pairs], axis=1), np.array([r["seconds"]["direct"] for r in dr]))
        out["direct"] = {"a": float(a), "b": float(b)}
    if d == 3:
        n = np.array([float(r["N"]) for r in rows])
        nlm = np.array([(r["K"] + 1.0) * (r["K"] + 2.0) / 2.0 for r in rows])
        a_s, b_s = _fit(np.stack([np.ones_like(n), nlm * n], axis=1), np.array([r["fast_coefficients"] for r in rows]))
        a, b = _fit(np.stack([np.ones_like(n), nlm * n], axis=1), np.array([r["seconds"]["fast"] for r in rows]))
        out["fast"] = {"a": a, "b_src": b_s, "b_eval": b - b_s}
        chunks = np.array([float(-(-r["N"] // sphere_nufft_chunk(r["K"]))) for r in rows])
        L2 = np.array([r["K"] ** 2.0 for r in rows])
        a, b, c = _fit(np.stack([chunks, 3.0 * n, chunks * L2], axis=1), np.array([r["seconds"]["nufft"] for r in rows]))
        out["nufft"] = {"a": a, "b": b, "c": c}
        return out
    f = [r for r in rows if "fast" in r["seconds"]]
    n = np.array([2.0 * r["N"] for r in f])
    k1 = np.array([r["K"] + 1.0 for r in f])
    a, b, c = _fit(np.stack([np.ones_like(n), k1 * n, n], axis=1), np.array([r["seconds"]["fast"] for r in f]))
    out["fast"] = {"a": a, "b": b, "c": c}
    a, b = _fit(np.stack([np.ones_like(n), n], axis=1), np.array([r["seconds"]["nufft"] for r in f]))
    out["nufft"] = {"a": a, "b": b}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--betas", default="1,2,5,10,25,50,100")
    p.add_argument("--sizes", default="30,100,300,1000,3000,10000,30000,100000")
    p.add_argument("--min-time", type=float, default=0.05)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--d", type=int, default=2, choices=(2, 3), help="2: S^1 (default), 3: S^2")
    p.add_argument("--fit", action="store_true")
    p.add_argument("--json")
    a = p.parse_args()
    rows = measure([float(b) for b in a.betas.split(",")], [int(n) for n in a.sizes.split(",")],
                   a.min_time, a.repeats, d=a.d)
    slow = [r for r in rows if r["auto_over_fastest"] is not None and r["auto_over_fastest"] > 1.1]
    print(f"auto within 10% of the fastest in {len(rows) - len(slow)} of {len(rows)} cases; worst "
          f"{max((r['auto_over_fastest'] or 1.0) for r in rows):.2f}x")
    out = {"rows": rows}
    if a.fit:
        out["fit"] = fit(rows, a.d)
        print("fit:", {m: {k: f"{v:.3g}" for k, v in c.items()} for m, c in out["fit"].items()})
        if "direct" in out["fit"]:
            unit = out["fit"]["direct"]["b"] / 1e-9
            print("in the unit of _C_DIRECT:", {m: {k: f"{v / unit:.3g}" for k, v in c.items()}
                                                 for m, c in out["fit"].items()})
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
