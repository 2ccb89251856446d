#!/usr/bin/env python3
"""Study (not the package's stepper): would the S^1 whole run meet its 2.5x target if the small-array work of
each stage were one compiled call instead of several numpy calls?

Why. The bench's S^1 run (K = 1024 modes, M = 3072 grid points, DP54 in the interaction picture, uniform data
to t = 10: 1110 steps, 6661 right-hand sides) measures 2.25x-2.55x its transform floor on most machines and
2.56x-2.99x on AMD EPYC family 25 model 1 (README "Performance"). Profiles there put a third of the time in
the FFTs and spread the rest over some 80 numpy calls a step of ~1-2 us each. What would close the gap, the
notes say, is a compiled routine for that work; this script measures it.

What is measured. The same steps as the package's run (its accepted step sizes replayed, from its own
initial state), each step made of:

- per stage: one C call that forms the stage from the stack of stages (the weighted sum, the factor
  e^{c h L}) straight into the inverse transform's input, zeroes its tail and forms the kernel row; the
  inverse FFT (the run's own pyFFTW plan); one C call for w = G + drift and the flux rho w (with, at the
  last stage, the minimum and maximum of rho and w that the CFL and positivity checks use); the forward
  FFT; one C call that stores the stage as (D e^{-c h L}) times the transform;
- per step: one C call for the error estimate's norm and one for the new state's norm and spectral tail,
  then the package's step controller and step rounding (Python, as in the run).

The C code is compiled here with the system's gcc (-O3, or STUDY_CFLAGS) and called through ctypes, with
every pointer taken once. It is a study: the package stays numpy, scipy and pyFFTW on this path. The
package run, the study's and the transform floor (the same number of inverse + forward executes back to
back) are timed in the same process: the two runs alternate, one floor after each pair, and both ratios are
taken against the best floor; the two runs are also compared pair by pair. The final states of the two
runs are compared (round-off only: the sums are in another order). The same loop is also timed with the
transforms left out.

    .venv/bin/python scripts/step_kernel_study.py [--repeats 7]

Needs gcc (Linux). The result on the machine of PERFORMANCE.md's seventeenth session is there.
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import bench_runs as br  # noqa: E402
from solvers.pde import solve_pde  # noqa: E402
from solvers.pde_circle import CircleDiscretization  # noqa: E402
from solvers.stepping import TABLEAUS, IFRungeKutta, StepController, round_step  # noqa: E402
from spectral.fourier import _energy  # noqa: E402

C_SOURCE = r"""
#include <math.h>
/* stage i: flat = sum_r w[r] stack[r] (n floats); spec0 = flat * factor (n floats, the state's float
   layout), the rest of row 0 up to nspec floats zero; kernel row j (complex, Ka entries) = spec0 * mult_j,
   the rest of that row zero. keep: also flat * factor into keep (the new state at an FSAL method's last
   stage). */
void stage_in(int nrows, const double *w, const double *stack, long n, const double *factor,
              double *spec, long nspec, int nkern, const double *mult, long Ka, double *keep)
{
    /* row by row (axpy form: the loops over j vectorise), accumulated in the transform's input */
    for (long j = 0; j < n; j++) spec[j] = w[0] * stack[j];
    for (int r = 1; r < nrows; r++) {
        const double wr = w[r], *x = stack + r * n;
        for (long j = 0; j < n; j++) spec[j] += wr * x[j];
    }
    for (long j = 0; j < n; j++) spec[j] *= factor[j];
    if (keep) for (long j = 0; j < n; j++) keep[j] = spec[j];
    for (long j = n; j < nspec; j++) spec[j] = 0.0;
    for (int q = 0; q < nkern; q++) {
        double *row = spec + (q + 1) * nspec;
        const double *m = mult + 2 * q * Ka;
        for (long k = 0; k < Ka; k++) {
            double a = spec[2 * k], b = spec[2 * k + 1], c = m[2 * k], d = m[2 * k + 1];
            row[2 * k] = a * c - b * d;
            row[2 * k + 1] = a * d + b * c;
        }
        for (long j = 2 * Ka; j < nspec; j++) row[j] = 0.0;
    }
}

/* w = G + drift (in G's row), flux = rho w; with mm: min rho, max rho, min w, max w into mm[0..3] */
void flux(long M, const double *rho, double *G, const double *drift, double *out, double *mm)
{
    if (!mm) {
        for (long j = 0; j < M; j++) { double w = G[j] + drift[j]; G[j] = w; out[j] = rho[j] * w; }
        return;
    }
    double rl = INFINITY, rh = -INFINITY, wl = INFINITY, wh = -INFINITY;
    for (long j = 0; j < M; j++) {
        double w = G[j] + drift[j];
        G[j] = w; out[j] = rho[j] * w;
        /* NaN propagates, as in np.minimum.reduce: the package's non-finite check sees it */
        double r = rho[j];
        rl = (r < rl || r != r) ? r : rl; rh = (r > rh || r != r) ? r : rh;
        wl = (w < wl || w != w) ? w : wl; wh = (w > wh || w != w) ? w : wh;
    }
    mm[0] = rl; mm[1] = rh; mm[2] = wl; mm[3] = wh;
}

/* out = n * s (complex, K entries); with D: k = n * D as well */
void store(long K, const double *n, const double *s, double *out, const double *D, double *k)
{
    for (long j = 0; j < K; j++) {
        double a = n[2 * j], b = n[2 * j + 1], c = s[2 * j], d = s[2 * j + 1];
        out[2 * j] = a * c - b * d; out[2 * j + 1] = a * d + b * c;
        if (D) { c = D[2 * j]; d = D[2 * j + 1]; k[2 * j] = a * c - b * d; k[2 * j + 1] = a * d + b * c; }
    }
}

/* sum of (sum_r w[r] stack[r] * factor)^2 over n floats: the squared norm of the error estimate (its
   float layout; the caller turns it into the L2 norm of the coefficients) */
double err_sumsq(int nrows, const double *w, const double *stack, long n, const double *factor, double *tmp)
{
    for (long j = 0; j < n; j++) tmp[j] = w[0] * stack[j];
    for (int r = 1; r < nrows; r++) {
        const double wr = w[r], *x = stack + r * n;
        for (long j = 0; j < n; j++) tmp[j] += wr * x[j];
    }
    double acc = 0.0;
    for (long j = 0; j < n; j++) { double e = tmp[j] * factor[j]; acc += e * e; }
    return acc;
}

/* sum of squares of v[0:n] and of v[cut:n] into out[0], out[1] */
void sumsq2(long n, const double *v, long cut, double *out)
{
    double a = 0.0, b = 0.0;
    for (long j = 0; j < cut; j++) a += v[j] * v[j];
    for (long j = cut; j < n; j++) b += v[j] * v[j];
    out[0] = a + b; out[1] = b;
}
"""


#: compiler flags (environment STUDY_CFLAGS): -O3 vectorises the loops for the baseline x86-64 (SSE2)
OPT = os.environ.get("STUDY_CFLAGS", "-O3")


def build() -> ctypes.CDLL:
    """Compile C_SOURCE with gcc and load it (the directory goes; the loaded library stays mapped)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "k.c").write_text(C_SOURCE)
        subprocess.run(["gcc", *OPT.split(), "-shared", "-fPIC", "-o", str(tmp / "k.so"), str(tmp / "k.c"), "-lm"],
                       check=True)
        lib = ctypes.CDLL(str(tmp / "k.so"))
    P, L, I, D = ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_double
    lib.stage_in.argtypes = [I, P, P, L, P, P, L, I, P, L, P]
    lib.flux.argtypes = [L, P, P, P, P, P]
    lib.store.argtypes = [L, P, P, P, P, P]
    lib.err_sumsq.argtypes = [I, P, P, L, P, P]
    lib.err_sumsq.restype = D
    lib.sumsq2.argtypes = [L, P, L, P]
    return lib


def ptr(a: np.ndarray) -> int:
    assert a.flags.c_contiguous
    return a.ctypes.data


class CompiledStepper:
    """The package run's DP54 steps in the interaction picture, each stage's small-array work in C."""

    def __init__(self, lib, model, K: int) -> None:
        self.lib = lib
        # what the C code assumes: w = G + drift (USA with strength 1 and a perceptron), one kernel row
        if model.attention != "unnormalized" or model.strength != 1.0 or model.perceptron is None:
            raise ValueError("the study's C code forms w = G + drift: USA, strength 1, with a perceptron")
        self.disc = disc = CircleDiscretization(model, K)
        if disc.Ka == 0 or len(disc._rows_kernel) != 1:
            raise ValueError("the study's C code forms exactly one kernel row (G)")
        self.tab = tab = TABLEAUS["DP54"]
        # the package stepper, for its exponentials and stage weights (the same numbers the run uses)
        self.ref = IFRungeKutta(disc.rhs, tab, disc.lin, (disc.rhs_flux, disc.divergence, True))
        u0 = np.zeros(K, dtype=complex)
        u0[0] = 1.0
        self.ref._buffers(u0)
        self.s = s = tab.stages
        self.K, self.n = K, 2 * K
        inv, fwd = disc._inv, disc._fwd
        self.spec = inv.spec                       # (rows, M/2 + 1) complex, C-contiguous
        self.nspec = 2 * inv.spec.shape[1]
        self.nkern = inv.spec.shape[0] - 1
        self.Ka = disc.Ka
        self.mult = np.ascontiguousarray(np.stack([m for _, m in disc._rows_kernel]) if self.nkern else
                                         np.zeros((1, 1), complex))
        self.rho, self.G = inv.grid[0], inv.grid[1]
        self.drift = np.ascontiguousarray(disc.drift)
        self.fluxbuf, self.flux_hat = fwd.grid[0], fwd.spec[0]
        self.inv, self.fwd = inv.execute, fwd.execute
        self.stack = self.ref._flat                 # (s + 1, 2K) floats: [u, g_1 .. g_s]
        self.W = self.ref._W
        self.D = np.ascontiguousarray(np.broadcast_to(disc.divergence, (K,)).astype(complex))
        self.mm = np.zeros(4)
        self.norms = np.zeros(2)
        self.u_new = np.empty(2 * K)
        self.k = np.empty(K, dtype=complex)
        self.cut = 2 * int(np.floor((2.0 / 3.0) * K))
        self.M = disc.basis.M
        self._ex_ptrs = {}
        self._tmp = np.empty(2 * K)
        self._ptmp = ptr(self._tmp)
        self._pst, self._pW = ptr(self.stack), ptr(self.W)
        self._row, self._wrow = self.stack.strides[0], self.W.strides[0]
        self._pspec, self._pmult, self._pnorms = ptr(self.spec), ptr(self.mult), ptr(self.norms)
        self._fixed = tuple(ptr(a) for a in (self.rho, self.G, self.drift, self.fluxbuf, self.mm, self.flux_hat,
                                             self.D, self.k, self.u_new))

    def first_rhs(self, u: np.ndarray) -> np.ndarray:
        return self.disc.rhs(0.0, u, True).copy()

    def _pointers(self, ex) -> tuple:
        """The raw addresses a step passes for the factors of one step size's exponentials (made once per
        slot: ``ndarray.ctypes`` builds an object per access, ~1 us)."""
        key = id(ex)
        if key not in self._ex_ptrs:
            s = self.s
            self._ex_ptrs[key] = ([ptr(ex.decay_end if i == s - 1 else ex.decay_of[i]) if i else None
                                   for i in range(s)],
                                  [ptr(ex.scaled_of[i]) if i else None for i in range(s)], ptr(ex.decay_end))
        return self._ex_ptrs[key]

    def step(self, u: np.ndarray, h: float, f0: np.ndarray):
        lib, s, n = self.lib, self.s, self.n
        ex = self.ref._exponentials(h)
        self.ref._weights(h)
        factors, scaled, decay_end = self._pointers(ex)
        st = self.stack
        st[0] = u.view(float)
        st[1] = f0.view(float)
        pst, pW, row, wrow = self._pst, self._pW, self._row, self._wrow
        pspec, pmult, nspec, nkern = self._pspec, self._pmult, self.nspec, self.nkern
        Ka, K, M = self.Ka, self.K, self.M
        prho, pG, pdrift, pflux, pmm, phat, pD, pk, pu = self._fixed
        inv, fwd = self.inv, self.fwd
        for i in range(1, s - 1):
            lib.stage_in(i + 1, pW + i * wrow, pst, n, factors[i], pspec, nspec, nkern, pmult, Ka, None)
            inv()
            lib.flux(M, prho, pG, pdrift, pflux, None)
            fwd()
            lib.store(K, phat, scaled[i], pst + (i + 1) * row, None, None)
        i = s - 1                       # the FSAL stage: the new state itself, with the diagnostics
        lib.stage_in(i + 1, pW + i * wrow, pst, n, factors[i], pspec, nspec, nkern, pmult, Ka, pu)
        inv()
        lib.flux(M, prho, pG, pdrift, pflux, pmm)
        fwd()
        lib.store(K, phat, scaled[i], pst + (i + 1) * row, pD, pk)
        err2 = lib.err_sumsq(s, pW + (s + 1) * wrow + 8, pst + row, n, decay_end, self._ptmp)
        lib.sumsq2(n, pu, self.cut, self._pnorms)
        return self.u_new.view(complex), self.k, err2


def compiled_run(cs: CompiledStepper, u0: np.ndarray, dts, opts, check: bool = True) -> tuple[np.ndarray, float]:
    """The package run's steps replayed (its step sizes), with the per-step control the run does: the error
    norm (``PDERun.error_norm``), the controller's proposal, the spectral tail, the CFL bound and the
    positivity check. ``check=False`` skips only the final comparison with the package run's path (for the
    timing without transforms, whose numbers are meaningless)."""
    ctrl = StepController(error_order=cs.tab.error_order)
    u = u0.copy()
    f = cs.first_rhs(u)
    unorm = None
    t0 = time.perf_counter()
    for h in dts:
        u_new, k, err2 = cs.step(u, float(h), f)
        v = cs.u_new
        if unorm is None:
            unorm = math.sqrt(_energy(u.view(float)))
        new_norm = math.sqrt(2.0 * cs.norms[0] - (v[0] * v[0] + v[1] * v[1]))     # fourier._energy's formula
        # err's mode 0 is exactly 0 (D_0 = 0, no weight on u): its norm needs no correction for c_0
        errn = math.sqrt(2.0 * err2) / (opts["atol"] + opts["rtol"] * max(unorm, new_norm))
        ctrl.propose(float(h), float(errn))
        tail = math.sqrt(2.0 * cs.norms[1]) / new_norm
        mm = cs.mm
        vmax = max(mm[3], -mm[2])
        bound = round_step(min(opts["cfl"] * cs.disc.spacing / vmax, 1e300))
        ok = mm[0] >= -opts["positivity_tol"] * max(mm[1], 1.0) and tail <= opts["tail_max"] and bound > 0
        if check and not ok:
            raise RuntimeError("the replayed run left the package run's path")
        u = u_new.copy()
        f = k.copy()
        unorm = new_norm
    return u, time.perf_counter() - t0


def _nothing() -> None:
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    lib = build()
    model = br._model(2)
    K = 1024
    r = solve_pde(model, 10.0, K, max_degree=K)
    dts = np.asarray(r.steps["dt"])[np.asarray(r.steps["accepted"], dtype=bool)]
    if r.nrejected:
        raise SystemExit(f"the package run rejected {r.nrejected} steps: the replay assumes none")
    u0, u_end = r.coefficients(0), r.coefficients(-1)
    cs = CompiledStepper(lib, model, K)
    nrhs = 6 * len(dts) + 1            # DP54 with FSAL, no rejected step (checked above)
    fn = br._floor_call(2, K)
    pkg, comp, floors = [], [], []
    for i in range(args.repeats):
        for kind in (("pkg", "comp") if i % 2 == 0 else ("comp", "pkg")):
            if kind == "pkg":
                t0 = time.perf_counter()
                solve_pde(model, 10.0, K, max_degree=K)
                pkg.append(time.perf_counter() - t0)
            else:
                u, wall = compiled_run(cs, u0, dts, r.options)
                comp.append(wall)
        floors.append(br._back_to_back(fn, nrhs))
    diff = float(np.linalg.norm(u - u_end) / np.linalg.norm(u_end))
    # the same loop with the transforms left out (their buffers keep their last values): what is not FFT
    inv, fwd = cs.inv, cs.fwd
    cs.inv = cs.fwd = _nothing
    try:
        bare = min(compiled_run(cs, u0, dts, r.options, check=False)[1] for _ in range(args.repeats))
    finally:
        cs.inv, cs.fwd = inv, fwd
    floor = min(floors)
    steps = len(dts)
    print(f"S^1 K = {K}, {steps} steps, {nrhs} right-hand sides; final states agree to {diff:.1e} (relative L2); "
          f"C compiled with {OPT}")
    print(f"transform floor (best of {len(floors)}): {1e3 * floor:.1f} ms, {1e6 * floor / steps:.0f} us per step")
    print(f"package run:  {1e3 * min(pkg):7.1f} ms = {min(pkg) / floor:.2f}x the floor, "
          f"{1e6 * min(pkg) / steps:.0f} us per step (solve_pde, setup included)")
    print(f"C per stage:  {1e3 * min(comp):7.1f} ms = {min(comp) / floor:.2f}x the floor, "
          f"{1e6 * min(comp) / steps:.0f} us per step (the steps only)")
    print(f"C per stage / package run: {min(comp) / min(pkg):.3f} (best / best), "
          f"{statistics.median(c / p for c, p in zip(comp, pkg)):.3f} (median of the pairs run back to back)")
    print(f"C per stage without the transforms: {1e6 * bare / steps:.0f} us per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
