"""Moved to :mod:`solvers.app.sweep` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import sweep as _moved

warnings.warn("solvers.sweep moved to solvers.app.sweep; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
