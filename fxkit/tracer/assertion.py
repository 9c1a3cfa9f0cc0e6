"""`fxkit._assert`: an assert that symbolic tracing keeps (torch.fx's ``torch._assert``).

A Python ``assert x.shape[1] > 4`` needs the comparison's value while tracing. ``fxkit._assert(cond,
message)`` is recorded as one call node instead (impure: dead-code elimination keeps it), and the
generated ``forward`` raises ``AssertionError(message)`` when the condition is false.
"""
from fxkit.tracer.wrap import wrap


@wrap(pure=False)
def _assert(condition, message=""):
    """Raise ``AssertionError(message)`` unless ``condition``; traced as one call node.

    Example:
        >>> fxkit._assert(x.shape[1] > 4, "x needs more than 4 features")
    """
    if not condition:
        raise AssertionError(message)
