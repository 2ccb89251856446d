"""Moved to :mod:`solvers.app.config` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import config as _moved

warnings.warn("solvers.config moved to solvers.app.config; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
