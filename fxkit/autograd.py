"""``fxkit.autograd``, the public name of `fxkit.runtime.autograd` (like ``torch.autograd``).

Example:
    >>> (dx,) = fxkit.autograd.grad((x * x).sum(), x)
"""
import fxkit.runtime  # noqa: F401  (loads the ops and their derivative rules)
from fxkit.runtime.autograd import *  # noqa: F401,F403
from fxkit.runtime.autograd import __all__  # noqa: F401
