#!/usr/bin/env python
"""Check the figures `attnpde` draws of archives against the rules of solvers/app/figure_check.py.

    .venv/bin/python scripts/check_figures.py runs/demo.h5 /tmp/runs/branch_circle.h5 /tmp/sweep_S1

Each argument is an archive (`attnpde run`, `validate` or `branch`: its figures as `attnpde plot` draws them)
or a sweep's output directory (its figure as `attnpde sweep` draws it, from the members' archives). Prints
each figure's violations (none: "ok") and exits 1 if any figure breaks a rule. Nothing is written.
"""
from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import matplotlib
    matplotlib.use("Agg")
    from solvers.app import figure_check as rules
    from solvers.app.archive import load
    from solvers.app.plots import plot_archive

    if not argv:
        print(__doc__.strip())
        return 2
    import tempfile

    bad = 0
    scratch = tempfile.TemporaryDirectory()
    for arg in argv:
        path = Path(arg)
        with rules.captured() as got:
            if path.is_dir():
                from solvers.app.sweep import plot_sweep
                plot_sweep(path)
                span = {}
            else:
                run = load(path)
                times = [r.t for r in (run.pde, run.particles) if r is not None and len(r.t)]
                span = rules.span_of(*times) if times else None
                plot_archive(path, Path(scratch.name))
        for name, fig in sorted(got.items()):
            found = rules.check(fig, span if span != {} else None)
            bad += bool(found)
            print(f"{arg} {name}: " + ("ok" if not found else f"{len(found)} violation(s) of "
                                       f"{', '.join(rules.broken_rules(found))}"))
            for v in found:
                print(f"    {v}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
