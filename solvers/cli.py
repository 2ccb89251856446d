"""Moved to :mod:`solvers.app.cli` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import cli as _moved

warnings.warn("solvers.cli moved to solvers.app.cli; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
if __name__ == "__main__":          # ``python -m solvers.cli`` still runs the command
    raise SystemExit(_moved.main())
sys.modules[__name__] = _moved
