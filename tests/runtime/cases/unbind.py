"""Cases for fxkit/runtime/ops/unbind.py: unbind, swapaxes, swapdims.

numpy float64 references for each op, PyTorch (`torch_ref`) for negative
dims and a non-contiguous input.
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _method(name):
    def call(a, *args, **kwargs):
        return getattr(a, name)(*args, **kwargs)

    return torch_ref(call)


def _unbind(a, dim=0):
    return tuple(np.moveaxis(a, dim, 0))


case("unbind", lambda r: ((randf(r, 3, 4),), {}), _unbind, id="dim0")
case("unbind", lambda r: ((randf(r, 2, 3, 4), 1), {}), _unbind, id="dim1")
case("unbind", lambda r: ((randf(r, 2, 3, 4),), {"dim": -1}), _method("unbind"), id="torch_negative")
case("unbind", lambda r: ((randf(r, 5, 2).T, 1), {}), _method("unbind"), id="torch_noncontiguous")
case("unbind", lambda r: ((randi(r, 1, 3),), {}), _unbind, id="int64_single")

case("swapaxes", lambda r: ((randf(r, 2, 3, 4), 0, 2), {}), np.swapaxes, id="basic")
case("swapaxes", lambda r: ((randf(r, 2, 3, 4), -1, 1), {}), _method("swapaxes"), id="torch_negative")
case("swapaxes", lambda r: ((randf(r, 3, 4),), {"axis0": 1, "axis1": 1}), lambda a, axis0, axis1: a, id="same")
case("swapdims", lambda r: ((randf(r, 2, 3, 4), 0, 1), {}), np.swapaxes, id="basic")
case("swapdims", lambda r: ((randf(r, 4, 3).T,), {"dim0": 0, "dim1": -1}), _method("swapdims"), id="torch_kwargs")
