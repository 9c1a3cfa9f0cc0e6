"""`Tensor`: one ndarray (numpy on cpu, cupy on cuda) and its device.

The operators and the op methods (``x + y``, ``x.relu()``, ``x.view(...)``)
are installed from the op registry by ``tensor_methods.py``, so a method and
its op are the same `Op`. This file holds only what is not an op: storage,
conversion to Python and numpy, printing.
"""
import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import Device, cpu, device_of_array


class Tensor:
    """An n-dimensional array on a device, with PyTorch's API.

    Example:
        >>> x = fxkit.tensor([[1.0, 2.0]])
        >>> (x * 2).relu()
        tensor([[2., 4.]])
    """

    __slots__ = ("_data", "device", "_grad", "__weakref__")
    __hash__ = object.__hash__
    __array_priority__ = 1000  # numpy defers ``ndarray + Tensor`` to Tensor.__radd__

    def __init__(self, data, device=None):
        if not hasattr(data, "dtype") or not hasattr(data, "shape"):
            raise DTypeError(
                f"Tensor(...) wraps an ndarray, got {type(data).__name__}; "
                f"use fxkit.tensor(data) to build one from Python values"
            )
        if isinstance(data, np.generic):
            data = np.asarray(data)
        self._data = data
        self.device = Device(device) if device is not None else device_of_array(data)
        self._grad = None
        _dt.from_numpy(data.dtype)  # refuse dtypes fxkit has no name for

    @classmethod
    def _make(cls, data, device):
        t = object.__new__(cls)
        t._data = data
        t.device = device
        t._grad = None
        return t

    # -- what every tensor knows ---------------------------------------------
    @property
    def shape(self):
        """The size of each dimension, a tuple of ints (PyTorch's ``torch.Size``)."""
        return self._data.shape

    @property
    def dtype(self):
        """The element type, an fxkit dtype (``fxkit.float32``)."""
        return _dt._BY_NP[self._data.dtype]

    @property
    def ndim(self):
        """The number of dimensions."""
        return self._data.ndim

    @property
    def is_cuda(self):
        """Whether the tensor lives on a cuda device."""
        return self.device.type == "cuda"

    @property
    def data(self):
        """The same tensor without autograd history (PyTorch's ``.data``)."""
        return Tensor._make(self._data, self.device)

    @data.setter
    def data(self, value):
        self._data = value._data
        self.device = value.device

    # -- autograd: state lives in ``_grad`` (None, or fxkit.runtime.autograd's AutogradMeta) ----
    @property
    def requires_grad(self):
        """Whether gradients flow to this tensor (set it on leaves: ``x.requires_grad = True``)."""
        meta = self._grad
        return meta is not None and meta.requires_grad

    @requires_grad.setter
    def requires_grad(self, requires_grad):
        from fxkit.runtime.autograd import tensor_api

        tensor_api.set_requires_grad(self, requires_grad)

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` in place and return the tensor."""
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        """The gradient accumulated by ``backward()`` (leaves, and tensors that called ``retain_grad()``)."""
        meta = self._grad
        return None if meta is None else meta.grad

    @grad.setter
    def grad(self, value):
        from fxkit.runtime.autograd import tensor_api

        tensor_api.set_grad(self, value)

    @property
    def grad_fn(self):
        """The recorded op call that produced this tensor; None for leaves."""
        meta = self._grad
        return None if meta is None else meta.grad_fn

    @property
    def is_leaf(self):
        """True unless this tensor is the result of a recorded op (it has a ``grad_fn``)."""
        meta = self._grad
        return meta is None or meta.grad_fn is None

    @property
    def retains_grad(self):
        """Whether ``retain_grad()`` was called on this non-leaf tensor."""
        meta = self._grad
        return meta is not None and meta.retains_grad

    @property
    def _version(self):
        """How many in-place writes autograd has counted on this tensor's storage."""
        meta = self._grad
        return 0 if meta is None else meta.version[0]

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate this tensor's gradient into the leaves it was computed from.

        Args:
            gradient: d(something)/d(self), of this tensor's shape; may be omitted
                for one-element tensors (it is then 1).
            retain_graph: keep the saved values for another backward.
            create_graph: higher-order gradients (not supported).
            inputs: only these tensors accumulate gradients.

        Example:
            >>> w = fxkit.randn(3, requires_grad=True)
            >>> (w * w).sum().backward()
            >>> w.grad   # 2 * w
        """
        from fxkit.runtime.autograd import engine

        engine.backward(self, gradient, retain_graph, create_graph, inputs)

    def detach(self):
        """A tensor sharing this one's data, outside the graph (it does not require grad)."""
        from fxkit.runtime.autograd import tensor_api

        return tensor_api.detach(self)

    def detach_(self):
        """Make this tensor a leaf that does not require grad, in place."""
        from fxkit.runtime.autograd import tensor_api

        return tensor_api.detach_(self)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` after ``backward()``."""
        from fxkit.runtime.autograd import tensor_api

        tensor_api.retain_grad(self)

    def register_hook(self, hook):
        """Call ``hook(grad)`` with this tensor's gradient during backward; a returned
        tensor replaces the gradient. Returns a handle whose ``remove()`` unregisters it."""
        from fxkit.runtime.autograd import tensor_api

        return tensor_api.register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after this leaf's gradient accumulated into ``.grad`` during
        backward (once per backward, with every contribution summed). Returns a handle whose
        ``remove()`` unregisters it."""
        from fxkit.runtime.autograd import tensor_api

        return tensor_api.register_post_accumulate_grad_hook(self, hook)

    def is_floating_point(self):
        """Whether the dtype is a floating-point one."""
        return self.dtype.is_floating_point

    def element_size(self):
        """Bytes per element."""
        return self._data.itemsize

    def nbytes(self):
        """Bytes of all the elements."""
        return self._data.nbytes

    def data_ptr(self):
        """The address of the first element (host or device memory)."""
        if self.device.type == "cpu":
            return self._data.__array_interface__["data"][0]
        return self._data.data.ptr

    # -- conversion to Python and numpy ---------------------------------------
    def numpy(self):
        """The ndarray itself on cpu (zero-copy); a cuda tensor must be moved first."""
        if self.device.type != "cpu":
            raise DTypeError(
                f"can't convert a {self.device} tensor to numpy; call .cpu() first"
            )
        return self._data

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self._data.size != 1:
            raise ShapeError(
                f"item(): a Tensor with {self._data.size} elements cannot be converted to a "
                f"Python number; only one-element tensors can"
            )
        return self._data.item()

    def tolist(self):
        """The values as (nested) Python lists of numbers."""
        return self._host().tolist()

    def cpu(self):
        """This tensor on the cpu (itself when it is there already)."""
        return self.to("cpu")

    def cuda(self, device=None):
        """This tensor on a cuda device: ``cuda()``, ``cuda(1)`` or ``cuda("cuda:1")``."""
        return self.to(f"cuda:{device}" if isinstance(device, int) else (device or "cuda"))

    def __array__(self, dtype=None, copy=None):
        a = self._host()
        return a if dtype is None else a.astype(dtype)

    def _host(self):
        return self._data if self.device.type == "cpu" else self._data.get()

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self):
        if self._data.size != 1:
            raise ShapeError(
                f"the truth value of a tensor with {self._data.size} elements is ambiguous; "
                f"use .any() or .all()"
            )
        return bool(self._data)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.category != 1 or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __format__(self, spec):
        if self._data.ndim == 0 and spec:
            return format(self.item(), spec)
        return repr(self)

    def __repr__(self):
        from fxkit.runtime.tensor_repr import tensor_repr

        return tensor_repr(self)

    # -- pickling (GraphModule deepcopy/pickle carries its tensors) ------------
    def __reduce__(self):
        return (_rebuild, (self._host(), str(self.device)))

    def __deepcopy__(self, memo):
        copy = type(self)._make(self._data.copy(), self.device)
        if self.requires_grad and self.is_leaf:
            copy.requires_grad = True
        return copy


def _rebuild(array, device):
    t = Tensor._make(np.asarray(array), cpu)
    return t if device == "cpu" else t.to(device)
