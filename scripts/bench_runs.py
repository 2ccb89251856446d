#!/usr/bin/env python3
"""Whole PDE runs and the cost of archiving them.

1. A whole run from uniform data to t = 10 at fixed resolution (circle K = 1024; sphere L = 127 when
   the sphere solver is present): wall time, steps, time per step. The floor is the number of
   right-hand-side evaluations times the bare transforms one of them needs (measured in the same
   run), so the ratio is the cost of everything else: stepping, error control, monitoring, snapshots.
2. Archive overhead: the same circle run with one snapshot per 0.1 time units written to an HDF5
   archive (through ``attnpde``'s runner) against the run with no output at all.

    python scripts/bench_runs.py
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solvers import Model, Perceptron, solve_pde  # noqa: E402
from solvers.config import parse_config  # noqa: E402
from solvers.runner import run_config  # noqa: E402

# A smooth, resolvable case that reaches t = 10: repulsive attention, tanh perceptron, a little noise.
CIRCLE = dict(d=2, beta=4.0, flow="descent", noise=0.02)
CONFIG = """
[model]
d = 2
beta = 4.0
flow = "descent"
noise = 0.02
[model.perceptron]
units = 2
activation = "tanh"
scale = 1.0
seed = 3
[pde]
degree = {K}
max_degree = {K}
t_final = 10.0
{save}
"""


def _model(d: int) -> Model:
    spec = dict(CIRCLE, d=d)
    return Model(perceptron=Perceptron.random(d, d, "tanh", 1.0, seed=3), **spec)


def _rhs_floor(d: int, degree: int) -> float:
    """Bare transform cost of one RHS evaluation for this model at this resolution."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if d == 2:
        import bench_circle_rhs as b
        from solvers.pde_circle import CircleDiscretization
        disc = CircleDiscretization(_model(2), degree)
        inv, fwd = disc._inv, disc._fwd
        return b.best_time(lambda: (inv.execute(), fwd.execute()))
    import bench_sphere_rhs as bs
    return bs.measure(_model(3), degree, repeats=7)["floor"]


def whole_run(d: int, degree: int) -> dict:
    model = _model(d)
    t0 = time.perf_counter()
    r = solve_pde(model, 10.0, degree, max_degree=degree)
    wall = time.perf_counter() - t0
    nrhs = len(r.steps["t"]) * 6 + 1          # DP54 with FSAL: 6 new stages per attempted step
    floor = nrhs * _rhs_floor(d, degree)
    name = f"whole PDE run S^{d - 1} {'K' if d == 2 else 'L'}={degree} to t=10"
    return {"case": name, "seconds": wall, "floor_seconds": floor, "ratio": wall / floor,
            "target": "report", "met": r.stop_reason == "t_final",
            "detail": f"{r.nsteps} steps ({r.nrejected} rejected), {1e3 * wall / max(r.nsteps, 1):.3f} ms/step, "
                      f"stop {r.stop_reason}"}


def archive_overhead(K: int = 1024, repeats: int = 3) -> list[dict]:
    """Best-of-``repeats`` wall times: the run writing its archive (a snapshot every 0.1) against the same
    run (same snapshots, hence the same steps) without an archive; and the cost of the snapshots
    themselves (diagnostics, output grid) against the run with no snapshots at all."""
    plain, bare, archived = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            t0 = time.perf_counter()
            solve_pde(_model(2), 10.0, K, max_degree=K, save_every=0.1)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            solve_pde(_model(2), 10.0, K, max_degree=K)
            bare.append(time.perf_counter() - t0)
            cfg = parse_config(CONFIG.format(K=K, save="save_every = 0.1"))
            t0 = time.perf_counter()
            run_config(cfg, Path(tmp) / f"a{i}.h5", progress=False, log=lambda s: None)
            # (the runner prints plain progress lines to stderr when not on a terminal)
            archived.append(time.perf_counter() - t0)
    ratio = min(archived) / min(plain)
    snap = min(plain) / min(bare)
    return [{"case": f"archive overhead, circle K={K}, snapshot every 0.1 (101 snapshots)",
             "seconds": min(archived), "floor_seconds": min(plain), "ratio": ratio,
             "target": "<= 1.05x the same run without an archive", "met": bool(ratio <= 1.05)},
            {"case": f"snapshot cost, circle K={K}, 101 snapshots vs none",
             "seconds": min(plain), "floor_seconds": min(bare), "ratio": snap, "target": "report", "met": True,
             "detail": "diagnostics + output grid + landing steps on snapshot times"}]


def records() -> list[dict]:
    out = [whole_run(2, 1024)]
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_sphere_rhs  # noqa: F401
        from solvers.pde_sphere import SphereDiscretization  # noqa: F401
        out.append(whole_run(3, 127))
    except ImportError as e:  # the sphere solver or its benchmark is not there
        out.append({"case": "whole PDE run S^2 L=127 to t=10", "seconds": None, "floor_seconds": None,
                    "ratio": None, "target": "report", "met": False, "detail": f"skipped: {e}"})
    out += archive_overhead()
    return out


def main() -> int:
    for r in records():
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
        print(f"{r['case']:62s} {secs:>9s} s  ratio {ratio:>6s}  [{r['target']}] {r.get('detail', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
