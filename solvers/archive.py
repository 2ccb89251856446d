"""Moved to :mod:`solvers.app.archive` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import archive as _moved

warnings.warn("solvers.archive moved to solvers.app.archive; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
