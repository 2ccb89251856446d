"""Run every configuration of runs/ into a directory, or compare two such directories dataset by dataset.

A refactoring that must not change a number is checked by running the configurations with the code before
and after it, on one machine, and comparing every dataset of every archive bit for bit::

    git stash / git checkout BEFORE;  python scripts/same_numbers.py run /tmp/before
    git checkout AFTER;               python scripts/same_numbers.py run /tmp/after
    python scripts/same_numbers.py compare /tmp/before /tmp/after

``run`` takes runs/*.toml (``attnpde run``) and runs/branch/*.toml (``attnpde branch``), one at a time under
``nice`` (the machine may be shared); ``--only NAME`` runs some of them. ``compare`` exits 1 when a dataset
differs in shape, type or any bit (NaN equal to NaN), or is in one archive only; attributes are listed apart,
as information (wall times, dates and versions differ between any two runs).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def configurations() -> list[tuple[str, Path]]:
    """(command, path) of every configuration of runs/."""
    return ([("run", p) for p in sorted((ROOT / "runs").glob("*.toml"))]
            + [("branch", p) for p in sorted((ROOT / "runs" / "branch").glob("*.toml"))])


def run(out: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    attnpde = str(Path(sys.executable).with_name("attnpde"))
    status = 0
    for command, path in configurations():
        name = ("branch_" if command == "branch" else "") + path.stem
        if only and name not in only:
            continue
        argv = ["nice", attnpde, command, str(path), "--out", str(out / f"{name}.h5"), "--force"]
        if command == "run":
            argv.append("--quiet")
        t0 = time.perf_counter()
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        print(f"{name}: exit {rc}, {time.perf_counter() - t0:.1f} s", flush=True)
        status = status or rc
    return status


#: attributes of HDF5 object references (the netCDF dimensions' links), which differ between any two files
_REFERENCES = ("DIMENSION_LIST", "REFERENCE_LIST")


def _items(f: h5py.File) -> tuple[dict, dict]:
    """(datasets by path, attributes by 'path@name') of an open file."""
    data, attrs = {}, {}

    def visit(name, obj):
        for k, v in obj.attrs.items():
            if k not in _REFERENCES:
                attrs[f"{name}@{k}"] = v
        if isinstance(obj, h5py.Dataset):
            data[name] = obj
    for k, v in f.attrs.items():
        attrs[f"@{k}"] = v
    f.visititems(visit)
    return data, attrs


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return a.tobytes() == b.tobytes() or bool(np.array_equal(a, b, equal_nan=True))
    if a.dtype.kind == "O":
        return all(x == y for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    return a.tobytes() == b.tobytes()


def compare(a_dir: Path, b_dir: Path) -> int:
    names = sorted({p.name for p in a_dir.glob("*.h5")} | {p.name for p in b_dir.glob("*.h5")})
    bad = 0
    for name in names:
        pa, pb = a_dir / name, b_dir / name
        if not (pa.exists() and pb.exists()):
            print(f"{name}: in one directory only")
            bad += 1
            continue
        with h5py.File(pa, "r") as fa, h5py.File(pb, "r") as fb:
            (da, aa), (db, ab) = _items(fa), _items(fb)
            diffs = [f"only in {a_dir}: {k}" for k in sorted(set(da) - set(db))]
            diffs += [f"only in {b_dir}: {k}" for k in sorted(set(db) - set(da))]
            diffs += [f"differs: {k} {da[k].shape} {da[k].dtype} / {db[k].shape} {db[k].dtype}"
                      for k in sorted(set(da) & set(db)) if not _same(da[k][()], db[k][()])]
            other = sorted(k for k in set(aa) | set(ab) if k not in aa or k not in ab or not _same(aa[k], ab[k]))
            print(f"{name}: {len(da)} datasets, {'all the same' if not diffs else f'{len(diffs)} DIFFER'}"
                  + (f"; attributes that differ: {', '.join(other)}" if other else ""))
            for line in diffs:
                print(f"    {line}")
            bad += bool(diffs)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run every configuration of runs/ into OUT")
    r.add_argument("out", type=Path)
    r.add_argument("--only", default="", help="comma-separated archive names (stems) to run")
    c = sub.add_parser("compare", help="compare the archives of two directories")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "run":
        return run(args.out, [s for s in args.only.split(",") if s])
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
