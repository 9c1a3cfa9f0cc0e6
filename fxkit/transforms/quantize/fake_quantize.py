"""Fake quantization: round values to the int8 grid in float, and let gradients through.

Quantization-aware training runs the float model with each quantized value
replaced by ``dequantize(quantize(x))``, so the weights learn to live with the
rounding. Rounding has a zero derivative almost everywhere; the straight-through
estimator (PyTorch's ``fake_quantize_per_tensor_affine`` backward) passes the
gradient unchanged where ``x`` falls inside the representable range and zero
where it is clamped::

    forward:   y = (clamp(round(x / scale + zero_point), qmin, qmax) - zero_point) * scale
    backward:  dy/dx = 1 where qmin <= round(x / scale + zero_point) <= qmax, else 0

It is written with fxkit autograd ops, ``y = q + (x * mask - (x * mask).detach())``
with ``q`` and ``mask`` computed without gradient, so the forward value is exactly
``q`` (what the converted integer model computes) and the gradient exactly ``mask``.
"""
import numpy as np

from fxkit.runtime.autograd import no_grad
from fxkit.runtime.nn.module import Module
from fxkit.runtime.quantized import dequantize_affine, quant_range, quantize_affine
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.quantize.observers import PER_TENSOR, Factory, MovingAverageMinMaxObserver, ObserverBase


def fake_quantize(x, scale, zero_point, dtype, axis=None):
    """``dequantize(quantize(x))`` with the straight-through gradient.

    Args:
        x: a float tensor (it may require grad).
        scale, zero_point, axis: as `fxkit.quantize_affine` (per channel: Tensors and an axis).
        dtype: fxkit.int8 or fxkit.uint8 (the grid's range).

    Returns:
        A float32 tensor of ``x``'s shape on the quantization grid.

    Example:
        >>> w = fxkit.randn(4, requires_grad=True)
        >>> fake_quantize(w, 0.1, 0, fxkit.int8).sum().backward()
        >>> w.grad   # ones where |w| <= 12.8
    """
    with no_grad():
        plain = x.detach()
        value = dequantize_affine(quantize_affine(plain, scale, zero_point, dtype, axis), scale, zero_point, axis)
        if not x.requires_grad:
            return value
        mask = _in_range(plain, scale, zero_point, dtype, axis)
    passed = x * mask
    return value + (passed - passed.detach())


def _in_range(plain, scale, zero_point, dtype, axis):
    """float32 1/0: whether ``round(x * (1 / scale) + zero_point)`` lies in the dtype's range
    (the unclamped quantization, computed as `quantize_affine` computes it)."""
    qmin, qmax = quant_range(dtype)
    xp = plain.device.xp
    data = plain._data
    s = xp.asarray(scale._data if isinstance(scale, Tensor) else scale, dtype=np.float32)
    z = xp.asarray(zero_point._data if isinstance(zero_point, Tensor) else zero_point, dtype=np.float32)
    if axis is not None:
        shape = [1] * data.ndim
        shape[axis] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    rounded = xp.rint(data.astype(np.float32, copy=False) * (np.float32(1) / s) + z)
    return Tensor._make(((rounded >= qmin) & (rounded <= qmax)).astype(np.float32), plain.device)


class FakeQuantize(Module):
    """An observer followed by fake quantization with the qparams it computes (PyTorch's ``FakeQuantize``).

    `prepare_qat` puts one after every activation to quantize and one on every
    weight; `convert` reads their qparams as it reads an observer's.

    Args:
        observer: the observer class (or `Factory`) watching the values.
        **observer_kwargs: its arguments (``dtype``, ``qscheme``, ...).

    Attributes:
        activation_post_process: the observer.
        observer_enabled: whether ``forward`` updates the statistics.
        fake_quant_enabled: whether ``forward`` rounds (else it is the identity).
    """

    def __init__(self, observer=MovingAverageMinMaxObserver, **observer_kwargs):
        super().__init__()
        self.activation_post_process = observer(**observer_kwargs)
        if not isinstance(self.activation_post_process, ObserverBase):
            raise TypeError(f"FakeQuantize: observer must build an observer (MinMaxObserver, ...), "
                            f"got {type(self.activation_post_process).__name__}")
        self.observer_enabled = True
        self.fake_quant_enabled = True

    @classmethod
    def with_args(cls, **kwargs):
        """A `Factory` building this fake quantizer with ``kwargs`` (checked now)."""
        return Factory(cls, kwargs)

    @property
    def dtype(self):
        return self.activation_post_process.dtype

    @property
    def qscheme(self):
        return self.activation_post_process.qscheme

    @property
    def calibrated(self):
        return self.activation_post_process.calibrated

    def calculate_qparams(self):
        """The observer's ``(scale, zero_point)``."""
        return self.activation_post_process.calculate_qparams()

    def forward(self, x):
        if self.observer_enabled:
            self.activation_post_process.observe(x._data)
        if not self.fake_quant_enabled or not self.calibrated:
            return x
        scale, zero_point = self.calculate_qparams()
        axis = None
        if self.qscheme not in PER_TENSOR:
            axis = self.activation_post_process.ch_axis % x.ndim
            device = x.device
            scale = Tensor._make(device.xp.asarray(scale), device)
            zero_point = Tensor._make(device.xp.asarray(zero_point), device)
        return fake_quantize(x, scale, zero_point, self.dtype, axis)

    def extra_repr(self):
        return f"fake_quant_enabled={self.fake_quant_enabled}, observer_enabled={self.observer_enabled}"


def is_observer(module):
    """Whether ``module`` observes values for quantization: an observer or a `FakeQuantize`."""
    return isinstance(module, (ObserverBase, FakeQuantize))
