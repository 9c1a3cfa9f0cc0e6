"""`allocation_limit`: a cap on what tensor factories may allocate inside a block.

`fxkit.load` builds each saved module by calling its constructor with the
arguments the file names; a 10 KB file declaring ``Linear(20000, 20000)`` would
make the constructor allocate 1.6 GB before anything could check the weights.
Inside ``with allocation_limit(n, what):`` every factory (``empty``, ``zeros``,
``rand``, ...) charges its bytes first and raises `ResourceLimitError` instead
of allocating past ``n``.

Example:
    >>> with allocation_limit(1 << 20, "module 'fc' of model.zip"):
    ...     fxkit.nn.Linear(20000, 20000)
    Traceback (most recent call last):
    ResourceLimitError: module 'fc' of model.zip would allocate 1.6 GB ...
"""
import contextlib
import contextvars
import math

from fxkit.errors import ResourceLimitError

_LIMIT = contextvars.ContextVar("fxkit_allocation_limit", default=None)


class _Limit:
    def __init__(self, nbytes, what, hint):
        self.nbytes, self.what, self.hint, self.used = nbytes, what, hint, 0


@contextlib.contextmanager
def allocation_limit(nbytes, what, hint=""):
    """Let tensor factories allocate at most ``nbytes`` in all inside the block.

    Args:
        nbytes: the cap in bytes.
        what: what is being built, for the error (``"module 'fc' of model.zip"``).
        hint: how to allow more, appended to the error.
    """
    token = _LIMIT.set(_Limit(nbytes, what, hint))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def charge(shape, itemsize, name):
    """Count a factory's new array of ``shape`` against the current limit (none: free).

    Raises:
        ResourceLimitError: the array would take the total past the limit.
    """
    limit = _LIMIT.get()
    if limit is None:
        return
    nbytes = math.prod(int(s) for s in shape) * itemsize
    limit.used += nbytes
    if limit.used > limit.nbytes:
        raise ResourceLimitError(f"{limit.what} would allocate {human_bytes(limit.used)} "
                                 f"({name}{tuple(shape)} takes {human_bytes(nbytes)}), more than the "
                                 f"{human_bytes(limit.nbytes)} allowed{limit.hint}")


def human_bytes(n):
    """``1.6 GB``, ``12.0 MB``, ``512 B``: sizes in messages."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
