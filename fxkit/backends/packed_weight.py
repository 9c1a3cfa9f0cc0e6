"""`packed_weight`: a lowered call's weight in the layout its product wants, made once, not every call.

The numba backend's conv, Winograd and linear calls multiply by their weight
rearranged (channels-last columns, Winograd's transformed filters, a linear's
``(in, out)`` copy). Generated code passes the same weight array on every
call, so the rearranged copy is kept on the call; it is made again when
another array comes, or after any tensor was written in place (`WRITES`: an
optimizer step may have changed the weight where it lies).
"""
import numpy as np

from fxkit.runtime.autograd.autograd_meta import WRITES


def packed_weight(call, weight, pack):
    """``pack(weight)`` as a C-contiguous array, kept on ``call`` (its ``_weight``, ``_writes`` and
    ``_packed`` slots) until ``weight`` is another array or a tensor was written in place."""
    if call._weight is not weight or call._writes != WRITES[0]:
        call._weight, call._writes, call._packed = weight, WRITES[0], np.ascontiguousarray(pack(weight))
    return call._packed
