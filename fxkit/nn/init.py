"""``fxkit.nn.init`` is `fxkit.runtime.nn.init` itself (one module, two names)."""
import sys

from fxkit.runtime.nn import init as _init

sys.modules[__name__] = _init
