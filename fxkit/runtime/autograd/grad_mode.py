"""Grad mode: whether ops record the autograd graph (``no_grad``, ``enable_grad``).

The state is one per-thread flag that `Op` dispatch reads only when
an input takes part in autograd, so code that never touches a tensor that
requires grad pays nothing for it. Like PyTorch's, each context manager also
works as a function decorator.

Example:
    >>> with fxkit.no_grad():
    ...     y = model(x)          # no graph is recorded; y.requires_grad is False
"""
import functools
import threading


class _PerThreadFlag(threading.local):
    """Grad mode of the calling thread, read and written as ``ENABLED[0]`` (or ``ENABLED.value``, what
    dispatch's hot paths read: an attribute of a thread-local costs no Python call).

    Per thread like PyTorch's: the pipeline executor trains stages on worker
    threads, and one thread's ``no_grad`` must not switch recording off in another.
    """

    value = True

    def __getitem__(self, index):
        return self.value

    def __setitem__(self, index, value):
        self.value = value


# NOTE: read by fxkit.runtime.op at every tracked dispatch; mutate in place, never rebind.
ENABLED = _PerThreadFlag()


def is_grad_enabled():
    """True when ops record the graph for tensors that require grad."""
    return ENABLED[0]


class _GradMode:
    """A context manager and decorator (``@no_grad()`` or ``@no_grad``) that sets grad mode
    and restores the previous one."""

    _mode = True

    def __new__(cls, *args):
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]):
            return cls()(args[0])  # used as ``@no_grad`` without parentheses
        return super().__new__(cls)

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
