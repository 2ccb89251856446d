#!/usr/bin/env python
"""Fuzz the configuration files: random mutations of runs/*.toml through ``attnpde run --quiet``.

Each case takes one configuration of runs/ (runs/branch/*.toml through ``attnpde branch``), mutates it
once, and runs the command on the result in a fresh directory, with a timeout and a cap on the process's
address space (``--mem-gib``, which the memory estimates count: ``solvers._memory.memory_limit``). A
mutation is one of:

* a number of the configuration scaled by 10^k, k from -300 to 300 (its type kept);
* a value (any key, or a table) replaced by a huge, tiny, negative, zero, NaN or infinite number, a 64-bit
  overflowing integer, a string (empty, long, with NUL or other control characters), a nested array
  (deep, ragged), a boolean, a table, a long array;
* a key added (unknown, or one the schema knows, with such a value) or removed;
* the text itself: truncated, a deep TOML array, NUL or non-UTF-8 bytes inserted, 1.5 MiB of comment.

So that the runs that are valid finish within the timeout, the keys that are not mutated are shrunk first
(t_final to at most 0.1, particles n to at most 300, no [compare] moments beyond 8). Outcomes:

    refused   exit 2 and one line "attnpde: error: ..." on stderr
    failed    exit 1 and one line (a stage failed after the archive was made: its status "failed")
    ran       exit 0 (listed with the mutation: a run that ran must be a valid configuration)
    interrupted  exit 130/143 (not expected)
    traceback "Traceback" on stderr, or more than one line on stderr with a non-zero exit
    hang      no exit within the timeout and no output (a run that was printing progress is "long")
    long      no exit within the timeout, progress printed (a valid but long run)

    scripts/studies/fuzz_configs.py [--cases 200] [--seed 0] [--timeout 60] [--mem-gib 6] [--jobs 2]
                                    [--keep DIR] [--json out.json]

The table of outcomes is printed, then every case that is not "refused" with its mutation (and, for
tracebacks and hangs, the last lines of stderr). Exit status 1 when a case gave a traceback or hung.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solvers.app.config import dump_toml  # noqa: E402

#: values a mutation puts in place of another
VALUES = [
    1e308, -1e308, 1.7976931348623157e308, 1e300, 1e200, 1e154, 1e100, 1e20, 1e16, 1e10, 1e9 + 1, 1e7,
    1e-300, 5e-324, 1e-308, 1e-20, 0.0, -0.0, -1.0, -1e-300, float("nan"), float("inf"), float("-inf"),
    0, 1, 2, -1, -7, 2 ** 31, 2 ** 53 + 1, 2 ** 62, 2 ** 63 - 1, -(2 ** 63), 10 ** 9, 10 ** 7, 100000,
    "", "x", "a\u0000b", "\u0001\u0002", "line\nbreak", "tab\there", "\u2028", "../../etc", "a/b",
    "é" * 150, "x" * 100000, True, False,
    [], [1.0], [1e308, 1e308], [1e-308, 1e-308], [5e-324, 0.0], [0.0, 0.0], [[1.0, 2.0]], [[[1.0]]],
    [1.0, "a"], [[1.0], [1.0, 2.0]], [float("nan"), 1.0], [float("inf"), 0.0], list(range(1000)),
    {}, {"x": 1},
]

#: keys the schema knows, added where absent
KNOWN = {
    "run": ["name", "description", "compression", "flush_interval", "checkpoint_interval"],
    "model": ["d", "beta", "flow", "attention", "strength", "noise"],
    "model.perceptron": ["units", "activation", "scale", "seed", "form", "bias_scale", "a", "c", "w", "b"],
    "initial": ["kind", "mu", "kappa", "axis", "degree", "amplitude"],
    "pde": ["degree", "t_final", "save_every", "rtol", "atol", "method", "cfl", "dt0", "dt_max", "max_degree",
            "tail_tol", "tail_max", "positivity_tol", "max_steps", "output_points", "threads", "continuation",
            "handoff_degree", "handoff_at", "nodes", "node_rtol", "node_atol", "merge_tol", "drift_tol", "kick",
            "atom_radius", "error_estimate"],
    "particles": ["n", "init", "seed", "integrator", "dt", "t_final", "save_every", "sum", "sum_tol", "max_steps",
                  "rtol", "atol", "dt_max"],
    "particles.stop": ["window", "drift_tol", "scale", "rule", "spread_factor"],
    "compare": ["moments", "mmd_beta", "atom_radius", "smoothing", "atom_threshold", "min_mass", "cluster_scale"],
    "branch": ["mode", "noise_range", "degree", "representation", "first_step", "max_step", "min_step",
               "max_points", "max_angle", "tol", "max_corrections", "tail_max"],
}


def _leaves(d: dict, path: tuple = ()) -> list[tuple]:
    out = []
    for k, v in d.items():
        out.append(path + (k,))
        if isinstance(v, dict):
            out += _leaves(v, path + (k,))
    return out


def _get(d: dict, path: tuple):
    for k in path:
        d = d[k]
    return d


def _shrink(raw: dict, keep: tuple) -> None:
    """Shorten the run (keys other than the mutated path ``keep``) so that a valid one ends in seconds."""
    def off(path):
        return path != keep[:len(path)] and keep != path[:len(keep)]
    for table in ("pde", "particles"):
        t = raw.get(table)
        if isinstance(t, dict):
            if off((table, "t_final")) and isinstance(t.get("t_final"), (int, float)):
                t["t_final"] = min(t["t_final"], 0.1)
                if off((table, "save_every")) and isinstance(t.get("save_every"), (int, float)):
                    t["save_every"] = min(t["save_every"], 0.05)
            if off((table, "error_estimate")) and table == "pde":
                t.setdefault("error_estimate", False)
    p = raw.get("particles")
    if isinstance(p, dict) and off(("particles", "n")) and isinstance(p.get("n"), int):
        p["n"] = min(p["n"], 300) if p.get("init") != "quadrature" else p["n"]
    b = raw.get("branch")
    if isinstance(b, dict) and off(("branch", "max_points")):
        b["max_points"] = 8


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """(mutated TOML text, what was done)."""
    kind = rng.random()
    if kind < 0.08:
        # the text itself
        what = rng.choice(["truncate", "deep", "nul", "bytes", "huge-comment", "deep-inline"])
        if what == "truncate":
            cut = rng.randrange(1, max(2, len(text)))
            return text[:cut], f"text truncated at {cut}"
        if what == "deep":
            n = rng.choice([300, 1000, 5000])
            return text + f"\nxdeep = {'[' * n}{']' * n}\n", f"array nested {n} deep"
        if what == "deep-inline":
            n = rng.choice([300, 2000])
            return text + "\nydeep = " + "{a = " * n + "1" + "}" * n + "\n", f"inline table nested {n} deep"
        if what == "nul":
            i = rng.randrange(len(text))
            return text[:i] + "\u0000" + text[i:], f"NUL inserted at {i}"
        if what == "bytes":
            i = rng.randrange(len(text))
            return text[:i] + "\udcff" + text[i:], f"byte 0xff inserted at {i}"
        return text + "#" + "x" * (3 << 19) + "\n", "1.5 MiB comment appended"
    raw = tomllib.loads(text)
    leaves = _leaves(raw)
    numbers = [q for q in leaves if isinstance(_get(raw, q), (int, float)) and not isinstance(_get(raw, q), bool)]
    if kind < 0.4 and numbers:
        # a number of the configuration scaled by 10^k (its type kept: deeper than the type checks)
        path = rng.choice(numbers)
        old = _get(raw, path)
        k = rng.choice([-300, -100, -20, -8, -3, -1, 1, 3, 6, 9, 12, 20, 100, 300])
        new = old * 10.0 ** k if isinstance(old, float) else (old * 10 ** k if k > 0 else max(old // 10 ** -k, 0))
        if isinstance(new, int) and new >= 1 << 63:
            new = (1 << 63) - 1
        _get(raw, path[:-1])[path[-1]] = new
        what = f"{'.'.join(path)} = {_short(new)} (x 10^{k})"
    elif kind < 0.75:
        path = rng.choice(leaves)
        value = rng.choice(VALUES)
        parent = _get(raw, path[:-1])
        parent[path[-1]] = value
        what = f"{'.'.join(path)} = {_short(value)}"
    elif kind < 0.9:
        tables = [p for p in [()] + [q for q in leaves if isinstance(_get(raw, q), dict)]]
        path = rng.choice(tables)
        name = ".".join(path)
        key = rng.choice(KNOWN.get(name, []) + ["bogus_key"])
        value = rng.choice(VALUES)
        _get(raw, path)[key] = value
        path = path + (key,)
        what = f"{'.'.join(path)} = {_short(value)} (added)"
    else:
        path = rng.choice(leaves)
        del _get(raw, path[:-1])[path[-1]]
        what = f"{'.'.join(path)} removed"
    _shrink(raw, path)
    return dump_toml(raw), what


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _limit(gib: float):
    def apply() -> None:
        b = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
        os.setsid()
    return apply


def run_case(i: int, base: Path, text: str, what: str, args) -> dict:
    branch = base.parent.name == "branch"
    with tempfile.TemporaryDirectory(prefix="fuzz_", dir=args.keep) as tmp:
        cfg = Path(tmp) / "c.toml"
        if "\udcff" in text:
            cfg.write_bytes(text.encode("utf-8", "surrogateescape"))
        else:
            cfg.write_text(text, encoding="utf-8")
        argv = [sys.executable, "-m", "solvers.app.cli", "branch" if branch else "run", "c.toml"]
        if not branch:
            argv.append("--quiet")
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", preexec_fn=_limit(args.mem_gib))
        try:
            out, err = proc.communicate(timeout=args.timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)          # the case's own process group (setsid in the child)
            out, err = proc.communicate()
            rc = None
    lines = err.strip().splitlines()
    if rc is None:
        outcome = "long" if (out.strip() or err.strip()) else "hang"
    elif "Traceback" in err:
        outcome = "traceback"
    elif rc == 2:
        outcome = "refused" if len(lines) == 1 and lines[0].startswith("attnpde: error: ") else "traceback"
    elif rc == 1:
        bad = [ln for ln in lines if ln.startswith("attnpde: error: ")]
        outcome = "failed" if bad and len(bad) == 1 else "traceback"
    elif rc == 0:
        outcome = "ran"
    elif rc in (130, 143):
        outcome = "interrupted"
    else:
        outcome = f"exit {rc}"
    return {"case": i, "config": str(base.relative_to(ROOT)), "mutation": what, "outcome": outcome, "rc": rc,
            "stderr": "\n".join(lines[-6:])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument("--mem-gib", type=float, default=6.0, help="address-space limit of each case (GiB)")
    ap.add_argument("--jobs", type=int, default=2, help="cases at once")
    ap.add_argument("--keep", help="directory for the cases' temporary directories (default: the system's)")
    ap.add_argument("--json", help="write every case's outcome here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bases = sorted((ROOT / "runs").glob("*.toml")) + sorted((ROOT / "runs" / "branch").glob("*.toml"))
    cases = []
    for i in range(args.cases):
        base = rng.choice(bases)
        text, what = mutate(base.read_text(), rng)
        cases.append((i, base, text, what))
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(*c, args), cases))
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    order = ["refused", "failed", "ran", "long", "traceback", "hang", "interrupted"]
    print(f"tried {len(results)}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in order
                                                 + sorted(set(counts) - set(order))))
    for r in results:
        if r["outcome"] != "refused":
            print(f"[{r['outcome']}] #{r['case']} {r['config']}: {r['mutation']}")
            if r["outcome"] in ("traceback", "hang", "failed", "interrupted") or r["outcome"].startswith("exit"):
                print("    " + r["stderr"].replace("\n", "\n    "))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if counts.get("traceback") or counts.get("hang") else 0


if __name__ == "__main__":
    raise SystemExit(main())
