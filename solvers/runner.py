"""Moved to :mod:`solvers.app.runner` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import runner as _moved

warnings.warn("solvers.runner moved to solvers.app.runner; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
