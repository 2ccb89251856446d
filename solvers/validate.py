"""Moved to :mod:`solvers.app.validate` (the run layer). This alias of the old path goes in the next release."""
import sys
import warnings

from .app import validate as _moved

warnings.warn("solvers.validate moved to solvers.app.validate; the old import path goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
