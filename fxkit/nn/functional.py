"""``fxkit.nn.functional`` is `fxkit.runtime.nn.functional` itself (one module, two names)."""
import sys

from fxkit.runtime.nn import functional as _functional

sys.modules[__name__] = _functional
