"""``fxkit.nn``, the public name of `fxkit.runtime.nn` (like ``torch.nn``).

Example:
    >>> from fxkit import nn
    >>> import fxkit.nn.functional as F
"""
from fxkit.runtime.nn import *  # noqa: F401,F403
from fxkit.runtime.nn import __all__  # noqa: F401
from fxkit.nn import functional, init  # noqa: E402  (the alias submodules, not runtime's)
from fxkit.nn import parallel  # noqa: E402,F401  (fxkit.nn.parallel.DistributedDataParallel, like torch's)
