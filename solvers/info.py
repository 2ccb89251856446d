"""Moved to :mod:`solvers.app.info` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import info as _moved

warnings.warn("solvers.info moved to solvers.app.info; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
