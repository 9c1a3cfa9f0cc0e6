"""Grad mode: whether ops record the autograd graph (``no_grad``, ``enable_grad``).

The state is one flag in a one-element list that `Op` dispatch reads only when
an input takes part in autograd, so code that never touches a tensor that
requires grad pays nothing for it. Like PyTorch's, each context manager also
works as a function decorator.

Example:
    >>> with fxkit.no_grad():
    ...     y = model(x)          # no graph is recorded; y.requires_grad is False
"""
import functools

# NOTE: read by fxkit.runtime.op at every tracked dispatch; mutate in place, never rebind.
ENABLED = [True]


def is_grad_enabled():
    """True when ops record the graph for tensors that require grad."""
    return ENABLED[0]


class _GradMode:
    """A context manager and decorator that sets grad mode and restores the previous one."""

    _mode = True

    def __enter__(self):
        self._previous = ENABLED[0]
        ENABLED[0] = self._mode

    def __exit__(self, *exc):
        ENABLED[0] = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapped


class no_grad(_GradMode):  # noqa: N801  (torch's name)
    """Disable graph recording: results of ops do not require grad.

    Use it for inference and for updating parameters in place (an optimizer's step).

    Example:
        >>> with fxkit.no_grad():
        ...     w -= 0.1 * w.grad
    """

    _mode = False


class enable_grad(_GradMode):  # noqa: N801
    """Enable graph recording again inside a ``no_grad`` block."""

    _mode = True


class set_grad_enabled(_GradMode):  # noqa: N801
    """Set grad mode to ``mode``: at once, and as a context manager restoring the previous mode.

    Example:
        >>> with fxkit.set_grad_enabled(is_training):
        ...     loss = criterion(model(x), y)
    """

    def __init__(self, mode):
        self._previous = ENABLED[0]
        self._mode = bool(mode)
        ENABLED[0] = self._mode

    def __enter__(self):
        ENABLED[0] = self._mode

    def __call__(self, fn):
        mode = self._mode
        ENABLED[0] = self._previous  # the decorator form does not change the mode at once

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapped
