"""Moved to :mod:`solvers.app.plots` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import plots as _moved

warnings.warn("solvers.plots moved to solvers.app.plots; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
