"""`Parameter`: a Tensor that belongs to a Module's learnable state.

Assigning a Parameter to a Module attribute registers it (``module.weight``
shows up in ``parameters()`` and ``state_dict()``); a plain Tensor does not.
A Parameter shares storage with the Tensor or array it wraps, like PyTorch's.
"""
import numpy as np

from fxkit.runtime.device import Device
from fxkit.runtime.tensor import Tensor


class Parameter(Tensor):
    """A module parameter.

    Args:
        data: the Tensor or numpy/cupy array to wrap (shared, not copied);
            None gives an empty float32 tensor, like ``torch.nn.Parameter()``.
        requires_grad: whether the parameter is a leaf that accumulates gradients
            (as in PyTorch, the default).

    Example:
        >>> w = nn.Parameter(fxkit.randn(3, 4))
        >>> w.requires_grad
        True
    """

    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        if isinstance(data, Tensor):
            Tensor.__init__(self, data._data, data.device)
        else:
            Tensor.__init__(self, data)
        self.requires_grad = requires_grad

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    def __deepcopy__(self, memo):
        return Parameter(Tensor._make(self._data.copy(), self.device), self.requires_grad)

    def __reduce__(self):
        return (_rebuild_parameter, (self._host(), str(self.device), self.requires_grad))


def _rebuild_parameter(array, device, requires_grad):
    data = Tensor._make(np.asarray(array), Device("cpu"))
    if device != "cpu":
        data = data.to(device)
    return Parameter(data, requires_grad)
