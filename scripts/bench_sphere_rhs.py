#!/usr/bin/env python3
"""Cost of one right-hand side of the PDE on S^2 against the bare SHTns transforms it needs.

The RHS at degree L performs, on the dealiased Gauss grid:
    synthesis of rho (degree L), gradient synthesis of Phi (degree La, the kernel bandwidth),
    SA only: synthesis of Psi (degree La), and the vector analysis of the flux rho v (degree L).
The floor is the best-of-``repeats`` time of exactly these transforms, run with the same SHTns
objects as the RHS in the same process; ratio = RHS time / floor. For reference the table also
shows the floor if every transform were done at the full degree L (what the RHS would cost without
its kernel-bandwidth truncation).

    .venv/bin/python scripts/bench_sphere_rhs.py [--degrees 63 255 511] [--repeats 7] [--threads 1]

``run(degrees, repeats, threads)`` returns records {case, seconds, floor_seconds, ratio, target, met}
(plus details) for a benchmark driver.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


from solvers import Model, Perceptron  # noqa: E402
from solvers.pde_sphere import SphereDiscretization  # noqa: E402

TARGET = 1.5          # RHS / floor at L = 255 (the design target); reported for every L


def _best_interleaved(fns: dict, repeats: int) -> dict:
    """Best-of-``repeats`` time of each callable, the callables taking turns in every round so that a
    load change on a shared machine affects all of them alike."""
    for fn in fns.values():                # warm-up: first touch of buffers, caches
        fn()
    best = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def _models() -> dict[str, Model]:
    p = Perceptron.random(3, 3, "relu", 1.0, seed=111)
    return {"USA beta=9 relu": Model(3, 9.0, "descent", perceptron=p),
            "SA beta=9 relu": Model(3, 9.0, "descent", attention="normalized", perceptron=p)}


def floor_transforms(disc: SphereDiscretization) -> dict:
    """The bare transforms of one RHS of ``disc`` as callables on their own buffers, with the same SHTns
    objects as the RHS: "floor" as the RHS does them (the kernel fields at the kernel's degree), "floor_full"
    every transform at degree L. Also "u", a smooth positive density's coefficients (the cost does not
    depend on the data)."""
    b, kb = disc.basis, disc.kbasis
    X = b.points
    rho = np.exp(0.8 * X[..., 0] - 0.5 * X[..., 2])
    u = b.analys(rho)
    u[0] = np.sqrt(4 * np.pi)
    f1, f2, f3 = b.spat_array(), b.spat_array(), b.spat_array()
    S, T = b.spec_array(), b.spec_array()
    kspec = np.ascontiguousarray(u if kb is b else u[: kb.nlm])   # any coefficients of the right size
    sh, ksh = b.sht, kb.sht
    sa = disc.model.normalized

    def transforms(kernel_sht, kernel_coeffs):
        """The transforms of one RHS, the kernel's (gradient, and Psi for SA) done by ``kernel_sht``."""
        def run():
            sh.SH_to_spat(u, f1)
            kernel_sht.SHsph_to_spat(kernel_coeffs, f2, f3)
            if sa:
                kernel_sht.SH_to_spat(kernel_coeffs, f2)
            sh.spat_to_SHsphtor(f2, f3, S, T)
        return run

    return {"floor": transforms(ksh, kspec), "floor_full": transforms(sh, u), "u": u}


def measure(model: Model, L: int, repeats: int = 15, threads: int = 1) -> dict:
    """Best-of-``repeats`` time of one RHS (with and without the diagnostics of the last stage) and of
    the bare transforms it needs (:func:`floor_transforms`), same SHTns objects, same process."""
    disc = SphereDiscretization(model, L, threads=threads)
    fl = floor_transforms(disc)
    u = fl["u"]
    t = _best_interleaved({"rhs": lambda: disc.rhs(0.0, u, False), "rhs_last": lambda: disc.rhs(0.0, u, True),
                           "floor": fl["floor"], "floor_full": fl["floor_full"]}, repeats)
    b = disc.basis
    return {"L": L, "La": disc.La, "nlat": b.nlat, "nphi": b.nphi, "transforms": 4 if model.normalized else 3,
            "rhs": t["rhs"], "rhs_last": t["rhs_last"], "floor": t["floor"], "floor_full_degree": t["floor_full"]}


def run(degrees=(63, 255, 511), repeats: int = 15, threads: int = 1) -> list[dict]:
    """Benchmark records {case, seconds, floor_seconds, ratio, target, met, ...} for every model and L."""
    out = []
    for name, model in _models().items():
        for L in degrees:
            m = measure(model, int(L), repeats, threads)
            ratio = m["rhs"] / m["floor"]
            out.append({"case": f"sphere rhs {name} L={L}", "seconds": m["rhs"], "floor_seconds": m["floor"],
                        "ratio": ratio, "target": TARGET, "met": bool(ratio <= TARGET), **m})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--degrees", type=int, nargs="+", default=[63, 255, 511])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    recs = run(a.degrees, a.repeats, a.threads)
    print(f"{'case':34s} {'La':>4s} {'grid':>10s} {'rhs ms':>8s} {'+diag ms':>9s} {'floor ms':>9s} "
          f"{'ratio':>6s} {'full-L floor ms':>16s} {'rhs/full':>9s}")
    for r in recs:
        print(f"{r['case']:34s} {r['La']:4d} {r['nlat']:4d}x{r['nphi']:<5d} {1e3 * r['rhs']:8.3f} "
              f"{1e3 * r['rhs_last']:9.3f} {1e3 * r['floor']:9.3f} {r['ratio']:6.2f} "
              f"{1e3 * r['floor_full_degree']:16.3f} {r['rhs'] / r['floor_full_degree']:9.2f}")
    print(f"target: rhs / floor <= {TARGET} (at L = 255); threads = {a.threads}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
