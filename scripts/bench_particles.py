#!/usr/bin/env python
"""Benchmark of one particle velocity evaluation: fast and nufft vs direct vs a naive O(N^2) numpy
reference.

Cases (all in the same run, USA ascent with a ReLU perceptron of d units, i.i.d. uniform particles):
  S^1, beta = 25, N in {1e3, 1e4, 2e4, 1e5, 1e6}; S^1, beta = 100, N in {1e5, 1e6};
  S^2, beta = 4, N in {1e3, 1e4, 1e5, 1e6}. Both series methods are timed: the compiled series ("fast": the
  Bessel series on S^1, the harmonics by Legendre recurrences on S^2) and the same series through ducc0's
  NUFFT ("nufft": 1-D on S^1, the spherical harmonic transforms at arbitrary points on S^2);
  ``method="auto"``'s choice is reported with them.

"One velocity evaluation" is what the particle solver does per stage: Psi and G at the N particles
(self-interaction included), the perceptron drift, and ``Model.velocity``. Timings are the best of a
few repetitions (wall clock, one BLAS thread for fast/direct as the solver runs them; the naive
reference keeps the BLAS default); the NUFFT's are the best of 5 after an untimed first evaluation. Naive / direct are skipped
where they would need more than ``naive_max_bytes`` of memory or an estimated ``max_seconds`` of time
(the table says so).

Targets (issue "Performance, second round"; the method "auto" picks): S^1 N = 1e6 <= 0.1 s at beta = 25
and <= 0.15 s at beta = 100; S^2 beta = 4 N = 1e5 <= 0.1 s and N = 1e6 <= 1 s; S^1 N = 2e4 Bessel sums
>= 100x the naive reference; peak memory of the N = 1e6 circle case (fast sums) and of the N = 1e6
sphere case (beta = 4, nufft sums) < 2 GiB (each measured in a fresh process running
``simulate_particles`` for two RK4 steps, which includes snapshots, energy, clusters).

Importable: :func:`benchmark_records` returns records {case, seconds, floor_seconds, ratio, target, met}
(plus "note"), with one convention for every record: ``ratio = floor_seconds / seconds`` and
``met = ratio >= target``. For a time budget, floor_seconds is the budget and target is 1; for a
speed-up, floor_seconds is the naive reference's time and target is the required factor; for the
memory case, "seconds" holds the peak in GiB and floor_seconds the limit (2 GiB).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

from solvers import Model, Perceptron  # noqa: E402
from solvers._blas import blas_threads  # noqa: E402
from solvers.interaction import InteractionSums  # noqa: E402
from solvers.particles import measure_velocity  # noqa: E402

GIB = 2.0 ** 30


def naive_velocity(model: Model, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The textbook O(N^2) evaluation: full N x N matrices of cosines and kernel values."""
    T = x @ x.T
    K = np.exp(model.beta * (T - 1.0)) * w[None, :]
    psi = K.sum(axis=1)
    H = K @ x
    G = H - np.sum(H * x, axis=1)[:, None] * x
    return model.velocity(G, psi[:, None], model.drift(x))


def _points(N: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((N, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _model(d: int, beta: float) -> Model:
    """The benchmark's model: USA ascent with a ReLU perceptron of d units (seed 111)."""
    return Model(d, beta, "ascent", perceptron=Perceptron.random(d, d, "relu", 1.0, seed=111))


def _best(f, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _velocity_fn(model: Model, sums: dict, method: str, x: np.ndarray, w: np.ndarray):
    """One velocity evaluation as the particle solver makes it (``measure_velocity``) with the sums of
    ``method`` (``sums``: method -> InteractionSums made for it)."""
    def run():
        with blas_threads(1):
            return measure_velocity(model, sums[method], x, w)[0]
    return run


def peak_memory(d: int, N: int, beta: float, sum: str) -> float:
    """Peak resident memory (GiB) of a fresh process running two RK4 steps of N particles on S^{d-1}
    (``simulate_particles`` with snapshots, energy and clusters, interaction sums ``sum``)."""
    # VmHWM (peak resident set of this address space) rather than ru_maxrss: Linux carries the
    # parent's high-water mark through fork + exec into ru_maxrss
    code = f"""
import numpy as np
from solvers import Model, Perceptron
from solvers.particles import simulate_particles
m = Model({d}, {beta}, "ascent", perceptron=Perceptron.random({d}, {d}, "relu", 1.0, seed=111))
r = simulate_particles(m, n={N}, t_final=0.02, dt=0.01, integrator="rk4", sum="{sum}")
assert r.stop_reason == "t_final", r.message
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ))
    return int(out.stdout.strip().splitlines()[-1]) * 1024 / GIB      # VmHWM is in kB


def peak_memory_circle(N: int = 10 ** 6, beta: float = 25.0) -> float:
    """:func:`peak_memory` on S^1 with the Bessel (fast) sums."""
    return peak_memory(2, N, beta, "fast")


def peak_memory_sphere(N: int = 10 ** 6, beta: float = 4.0) -> float:
    """:func:`peak_memory` on S^2 with the NUFFT sums (what "auto" picks at this size)."""
    return peak_memory(3, N, beta, "nufft")


def looser_tolerance(d: int = 2, beta: float = 25.0, N: int = 10 ** 6, tol: float = 1e-12, reps: int = 9,
                     n_check: int = 2000) -> dict:
    """What a looser ``sum_tol`` buys: one velocity evaluation with the NUFFT sums at the default
    tolerance and at ``tol`` (which also sets the NUFFT's precision), alternating, ``reps`` pairs; and each
    one's largest error in Psi and G at ``n_check`` of the points against the direct sums, relative to max Psi.

    Returns {seconds_default, seconds_loose (best of reps), paired_ratio (median of loose / default),
    error_default, error_loose, K_default, K_loose, eps_default, eps_loose}.
    """
    from solvers.interaction import direct_fields
    model = _model(d, beta)
    x = _points(N, d, seed=N)
    w = np.full(N, 1.0 / N)
    sums = {"default": InteractionSums(d, beta, "nufft"), "loose": InteractionSums(d, beta, "nufft", tol=tol)}
    evaluate = {k: _velocity_fn(model, sums, k, x, w) for k in sums}
    times = {k: [] for k in sums}
    for i in range(reps + 1):
        for k in (("default", "loose") if i % 2 == 0 else ("loose", "default")):
            t0 = time.perf_counter()
            evaluate[k]()
            if i:                                    # the first pair is not timed (warm-up)
                times[k].append(time.perf_counter() - t0)
    psi_d, G_d = direct_fields(x[:n_check], x, w, beta)
    scale = float(np.abs(psi_d).max())
    out = {"paired_ratio": float(np.median(np.array(times["loose"]) / np.array(times["default"])))}
    for k, s in sums.items():
        psi, G = s.fields(x, w, x[:n_check])
        out[f"seconds_{k}"] = min(times[k])
        out[f"error_{k}"] = max(float(np.abs(psi - psi_d).max()), float(np.abs(G - G_d).max())) / scale
        nu = s.nufft
        out[f"K_{k}"] = nu.K if d == 2 else nu.L
        out[f"eps_{k}"] = nu.eps
    return out


PLAN = ((2, 25.0, (10 ** 3, 10 ** 4, 2 * 10 ** 4, 10 ** 5, 10 ** 6)), (2, 100.0, (10 ** 5, 10 ** 6)),
        (3, 4.0, (10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6)))


def velocity_rows(plan=PLAN, naive_max_bytes: float = 8 * GIB, max_seconds: float = 60.0,
                  verbose: bool = True) -> list[dict]:
    """Time one velocity evaluation (fast, direct, naive) for every (d, beta, sizes) of ``plan``.

    Returns rows {d, beta, N, fast, nufft, auto, direct, naive}: seconds (best of a few), or a
    "skipped (...)" text for direct / naive where they would exceed ``naive_max_bytes`` or an estimated
    ``max_seconds``; auto is the method ``InteractionSums(method="auto")`` picks.
    """
    rows = []
    per_pair = {}          # measured direct / naive seconds per pair, to estimate skipped sizes
    for d, beta, sizes in plan:
        model = _model(d, beta)
        sums = {m: InteractionSums(d, beta, m) for m in ("fast", "nufft", "direct")}
        for N in sizes:
            x = _points(N, d, seed=N)
            w = np.full(N, 1.0 / N)
            reps = 3 if N >= 10 ** 5 else 5
            row = {"d": d, "beta": beta, "N": N}
            row["fast"] = _best(_velocity_fn(model, sums, "fast", x, w), reps)
            # the NUFFT's first evaluation of a point count is not one of the timed ones (warm-up), and the
            # best is of 5
            nufft = _velocity_fn(model, sums, "nufft", x, w)
            nufft()
            row["nufft"] = _best(nufft, max(reps, 5))
            row["auto"] = InteractionSums(d, beta).method_for(N)
            for name in ("direct", "naive"):
                est = per_pair.get((d, name), None)
                est_s = None if est is None else est * N * N
                mem = (2 if name == "naive" else 0) * 8.0 * N * N
                if name == "naive" and mem > naive_max_bytes:
                    row[name] = f"skipped (needs {mem / GIB:.0f} GiB)"
                elif est_s is not None and est_s > max_seconds:
                    row[name] = f"skipped (est. {est_s:.0f} s)"
                else:
                    if name == "direct":
                        f = _velocity_fn(model, sums, "direct", x, w)
                    else:
                        def f(x=x, w=w):
                            return naive_velocity(model, x, w)
                    t = _best(f, 1 if N >= 10 ** 4 else 3)
                    row[name] = t
                    per_pair[(d, name)] = t / (N * N)
            rows.append(row)
            if verbose:
                print(_fmt(row), flush=True)
    return rows


def benchmark_records(quick: bool = False, naive_max_bytes: float = 8 * GIB, max_seconds: float = 60.0,
                      verbose: bool = True) -> list[dict]:
    """Run the benchmark; return the records described in the module docstring.

    ``quick`` keeps N <= 1e4 and skips the memory measurement (seconds, no target records).
    """
    records = []
    peak = peak2 = None
    if not quick:
        peak, peak2 = peak_memory_circle(), peak_memory_sphere()
        if verbose:
            print(f"peak memory, S^1 N=1e6 (two RK4 steps in a fresh process): {peak:.3f} GiB", flush=True)
            print(f"peak memory, S^2 N=1e6 beta=4 nufft (two RK4 steps in a fresh process): {peak2:.3f} GiB",
                  flush=True)
    plan = [(d, beta, [n for n in sizes if not quick or n <= 10 ** 4]) for d, beta, sizes in PLAN]
    rows = velocity_rows(plan, naive_max_bytes, max_seconds, verbose)
    results = {(row["d"], row["beta"], row["N"]): row for row in rows}

    # target records
    def rec(case, seconds, floor, target, note=""):
        ratio = None if (seconds is None or floor is None) else floor / seconds
        met = None if (ratio is None or target is None) else bool(ratio >= target)
        records.append({"case": case, "seconds": seconds, "floor_seconds": floor, "ratio": ratio,
                        "target": target, "met": met, "note": note})

    for key, budget in (((2, 25.0, 10 ** 6), 0.1), ((2, 100.0, 10 ** 6), 0.15), ((3, 4.0, 10 ** 5), 0.1),
                        ((3, 4.0, 10 ** 6), 1.0)):
        if key in results:
            r = results[key]
            rec(f"S^{key[0] - 1} velocity, auto ({r['auto']}), N={key[2]:.0e}, beta={key[1]:g}",
                r[r["auto"]], budget, 1.0, f"budget {budget} s")
    r = results.get((2, 25.0, 2 * 10 ** 4))
    if r is not None and isinstance(r["naive"], float):
        rec("S^1 velocity, fast vs naive O(N^2), N=2e4, beta=25", r["fast"], r["naive"], 100.0,
            "floor_seconds = naive reference time; ratio = speed-up")
    for row in rows:
        for name in ("direct", "naive"):
            if isinstance(row[name], float):
                rec(f"S^{row['d'] - 1} velocity, {name}, N={row['N']:.0e}", row[name], None, None)
        if row["fast"] is not None:
            rec(f"S^{row['d'] - 1} velocity, fast, N={row['N']:.0e}, beta={row['beta']:g}", row["fast"], None, None)
        if row["nufft"] is not None:
            rec(f"S^{row['d'] - 1} velocity, nufft, N={row['N']:.0e}, beta={row['beta']:g}", row["nufft"], None, None)
    if peak is not None:
        rec("S^1 N=1e6 two RK4 steps: peak RSS (GiB in 'seconds')", peak, 2.0, 1.0,
            f"peak resident memory {peak:.3f} GiB, limit 2 GiB")
    if peak2 is not None:
        rec("S^2 N=1e6 beta=4 nufft two RK4 steps: peak RSS (GiB in 'seconds')", peak2, 2.0, 1.0,
            f"peak resident memory {peak2:.3f} GiB, limit 2 GiB")
    return records


def _fmt(row) -> str:
    def cell(v):
        return f"{v:10.4g} s" if isinstance(v, float) else f"{str(v):>12}"
    # the compiled series
    name, best = "fast", row["fast"]
    sp = ""
    if isinstance(row["naive"], float):
        sp = f"  {name}/naive speed-up {row['naive'] / best:8.1f}x"
    if isinstance(row["direct"], float):
        sp += f"  {name}/direct {row['direct'] / best:8.1f}x"
    nu = f"  nufft {cell(row['nufft'])}" if row.get("nufft") is not None else ""
    return (f"S^{row['d'] - 1} beta={row['beta']:<4g} N={row['N']:<8d} fast {cell(row['fast'])}{nu}  "
            f"direct {cell(row['direct'])}  naive {cell(row['naive'])}{sp}  (auto: {row['auto']})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N <= 1e4 only, no memory case (no target records)")
    ap.add_argument("--json", type=Path, help="also write the records to this file")
    args = ap.parse_args(argv)
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; cores {os.cpu_count()}")
    records = benchmark_records(quick=args.quick)
    print("\ntargets:")
    for r in records:
        if r["target"] is not None:
            print(f"  {r['case']}: {r['seconds']:.4g} vs {r['floor_seconds']:.4g} -> ratio {r['ratio']:.3g} "
                  f"(target >= {r['target']:g}) {'MET' if r['met'] else 'NOT MET'}  [{r['note']}]")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
