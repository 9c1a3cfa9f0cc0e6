"""Observers: modules that watch the values flowing past them and choose quantization parameters.

`prepare` puts one after every activation that will be quantized; each is a
``call`` node of the prepared graph, returns its input unchanged, and records
statistics. `convert` then asks each for ``calculate_qparams()``. The formulas
are ``torch.ao.quantization``'s (float32 arithmetic, the same eps, round half
to even for zero points), so the same data gives the same scale and zero point:

* affine: ``scale = (max(max, 0) - min(min, 0)) / (qmax - qmin)``,
  ``zero_point = qmin - round(min(min, 0) / scale)``;
* symmetric: ``scale = max(-min(min, 0), max(max, 0)) / ((qmax - qmin) / 2)``,
  zero point 0 for int8 and 128 for uint8.

`MinMaxObserver` keeps the running extremes, `MovingAverageMinMaxObserver` an
exponential average of each batch's extremes, `PerChannelMinMaxObserver` the
extremes per channel (for weights), `HistogramObserver` a histogram from which
it picks the clipping range minimising the quantization error (``method="mse"``)
or covering a percentile of the values (``method="percentile"``).
"""
import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import device_of_array
from fxkit.runtime.nn.module import Module
from fxkit.runtime.ops.factories import tensor
from fxkit.runtime.quantized import QUANT_DTYPES, quant_dtype, quant_range

_EPS = np.float32(np.finfo(np.float32).eps)
PER_TENSOR = ("per_tensor_affine", "per_tensor_symmetric")
PER_CHANNEL = ("per_channel_affine", "per_channel_symmetric")


class Factory:
    """A class with some constructor arguments bound: ``MinMaxObserver.with_args(dtype=fxkit.uint8)``.

    Calling it builds a new instance; the arguments are checked when the factory is
    made, so a bad configuration fails before anything runs.
    """

    def __init__(self, cls, kwargs):
        self.cls = cls
        self.kwargs = kwargs
        cls(**kwargs)

    def __call__(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})

    def __repr__(self):
        args = ", ".join(f"{k}={_show(v)}" for k, v in self.kwargs.items())
        return f"{self.cls.__name__}.with_args({args})"

    def __eq__(self, other):
        return isinstance(other, Factory) and (self.cls, self.kwargs) == (other.cls, other.kwargs)

    def __hash__(self):
        return hash(self.cls)


def _show(value):
    return value.__name__ if isinstance(value, type) else repr(value)


def qparams_from_range(min_val, max_val, dtype, qscheme, quant_min, quant_max):
    """Scale and zero point of a clipping range, as ``torch.ao``'s ``_calculate_qparams``.

    Args:
        min_val, max_val: float32 arrays (one element per tensor or per channel).
        dtype: fxkit.int8 or fxkit.uint8.
        qscheme: one of `PER_TENSOR` or `PER_CHANNEL`.
        quant_min, quant_max: the integer range.

    Returns:
        ``(scale, zero_point)``: float32 and int32 arrays of ``min_val``'s shape.
    """
    min_neg = np.minimum(min_val, np.float32(0)).astype(np.float32)
    max_pos = np.maximum(max_val, np.float32(0)).astype(np.float32)
    if qscheme.endswith("symmetric"):
        max_pos = np.maximum(-min_neg, max_pos)
        scale = np.maximum(max_pos / np.float32((quant_max - quant_min) / 2), _EPS)
        middle = 128 if (quant_min, quant_max) == (0, 255) else (quant_min + quant_max) // 2
        zero_point = np.full(scale.shape, middle if dtype is _dt.uint8 else 0, np.int32)
    else:
        scale = np.maximum((max_pos - min_neg) / np.float32(quant_max - quant_min), _EPS)
        zero_point = quant_min - np.rint(min_neg / scale).astype(np.int32)
        zero_point = np.clip(zero_point, quant_min, quant_max).astype(np.int32)
    return scale.astype(np.float32), zero_point


class ObserverBase(Module):
    """What every observer shares: dtype, scheme, integer range, and the qparams formula.

    Args:
        dtype: fxkit.int8 or fxkit.uint8.
        qscheme: ``"per_tensor_affine"`` or ``"per_tensor_symmetric"`` (the per-channel
            observer takes the ``per_channel_`` ones).
        reduce_range: use one bit less (int8: -64..63, uint8: 0..127), as PyTorch does
            for x86 kernels whose 16-bit intermediate sums could otherwise saturate.
        quant_min, quant_max: a custom integer range inside the dtype's.

    Attributes:
        enabled: whether ``forward`` records statistics (the value passes through either way).
    """

    schemes = PER_TENSOR

    def __init__(self, dtype=_dt.int8, qscheme="per_tensor_affine", reduce_range=False, quant_min=None,
                 quant_max=None):
        super().__init__()
        name = type(self).__name__
        self.dtype = quant_dtype(dtype, name)
        if qscheme not in self.schemes:
            raise DTypeError(f"{name}: qscheme {qscheme!r} is not supported; use one of {', '.join(self.schemes)}")
        self.qscheme = qscheme
        self.reduce_range = reduce_range
        low, high = quant_range(self.dtype)
        if quant_min is not None or quant_max is not None:
            quant_min = low if quant_min is None else quant_min
            quant_max = high if quant_max is None else quant_max
            if not low <= quant_min < quant_max <= high:
                raise ShapeError(f"{name}: quant_min={quant_min}, quant_max={quant_max} must satisfy "
                                 f"{low} <= quant_min < quant_max <= {high} for {self.dtype.name}")
        elif reduce_range:
            quant_min, quant_max = low // 2, high // 2
        else:
            quant_min, quant_max = low, high
        self.quant_min, self.quant_max = quant_min, quant_max
        self.enabled = True

    @classmethod
    def with_args(cls, **kwargs):
        """A `Factory` building this observer with ``kwargs`` (checked now)."""
        return Factory(cls, kwargs)

    def forward(self, x):
        if self.enabled:
            self.observe(x._data)
        return x

    @property
    def calibrated(self):
        """Whether the observer has seen data (convert needs every observer calibrated)."""
        return bool(np.isfinite(self.min_val.numpy()).all())

    def calculate_qparams(self):
        """``(scale, zero_point)``: a float and an int per tensor; float32/int32 arrays per channel."""
        low, high = self.clipping_range()
        scale, zero_point = qparams_from_range(low, high, self.dtype, self.qscheme, self.quant_min, self.quant_max)
        if self.qscheme in PER_TENSOR:
            return float(scale), int(zero_point)
        return scale, zero_point

    def clipping_range(self):
        """The float32 ``(min, max)`` the qparams cover."""
        return self.min_val.numpy(), self.max_val.numpy()

    def extra_repr(self):
        return (f"dtype={self.dtype.name}, qscheme={self.qscheme}, quant_min={self.quant_min}, "
                f"quant_max={self.quant_max}, min_val={self.min_val.numpy()}, max_val={self.max_val.numpy()}")

    def _init_running(self, shape=()):
        self.register_buffer("min_val", tensor(np.full(shape, np.inf, np.float32)))
        self.register_buffer("max_val", tensor(np.full(shape, -np.inf, np.float32)))

    def _set_running(self, low, high):
        self.min_val._data[...] = low
        self.max_val._data[...] = high


def _extremes(xp, data, axes=None):
    """float32 host arrays of the min and max of ``data`` (over ``axes``)."""
    if data.size == 0:
        raise ShapeError("observer: cannot observe an empty tensor")
    low, high = xp.min(data, axis=axes), xp.max(data, axis=axes)
    to_host = getattr(low, "get", None)
    if to_host is not None:
        low, high = low.get(), high.get()
    return np.asarray(low, np.float32), np.asarray(high, np.float32)


def _xp(data):
    return device_of_array(data).xp


class MinMaxObserver(ObserverBase):
    """Running minimum and maximum of everything observed (PyTorch's ``MinMaxObserver``).

    Example:
        >>> obs = MinMaxObserver(dtype=fxkit.int8)
        >>> obs(fxkit.tensor([-1.0, 3.0]))
        >>> obs.calculate_qparams()
        (0.01568627543747425, -64)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._init_running()

    def observe(self, data):
        low, high = _extremes(_xp(data), data)
        self._set_running(np.minimum(self.min_val.numpy(), low), np.maximum(self.max_val.numpy(), high))


class MovingAverageMinMaxObserver(ObserverBase):
    """Exponential moving averages of each batch's minimum and maximum (for activations in QAT).

    Args:
        averaging_constant: weight of the newest batch, ``min += c * (batch_min - min)``.
        **kwargs: as `ObserverBase`.
    """

    def __init__(self, averaging_constant=0.01, **kwargs):
        super().__init__(**kwargs)
        if not 0 < averaging_constant <= 1:
            raise ShapeError(f"MovingAverageMinMaxObserver: averaging_constant must be in (0, 1], "
                             f"got {averaging_constant}")
        self.averaging_constant = averaging_constant
        self._init_running()

    def observe(self, data):
        low, high = _extremes(_xp(data), data)
        if not self.calibrated:
            self._set_running(low, high)
            return
        c = np.float32(self.averaging_constant)
        old_low, old_high = self.min_val.numpy(), self.max_val.numpy()
        self._set_running(old_low + c * (low - old_low), old_high + c * (high - old_high))


class PerChannelMinMaxObserver(ObserverBase):
    """Running minimum and maximum per slice along ``ch_axis`` (for weights).

    Args:
        ch_axis: the channel dimension (0: output channels of Linear and Conv2d weights).
        qscheme: ``"per_channel_symmetric"`` (default) or ``"per_channel_affine"``.
        **kwargs: as `ObserverBase`.
    """

    schemes = PER_CHANNEL

    def __init__(self, ch_axis=0, qscheme="per_channel_symmetric", **kwargs):
        super().__init__(qscheme=qscheme, **kwargs)
        self.ch_axis = ch_axis
        self._init_running((0,))

    @property
    def calibrated(self):
        return self.min_val.shape[0] > 0

    def observe(self, data):
        if data.ndim == 0:
            raise ShapeError("PerChannelMinMaxObserver: a 0-d tensor has no channels")
        axis = self.ch_axis % data.ndim
        axes = tuple(i for i in range(data.ndim) if i != axis)
        low, high = _extremes(_xp(data), data, axes)
        if self.calibrated:
            if self.min_val.shape != low.shape:
                raise ShapeError(f"PerChannelMinMaxObserver: observed {low.shape[0]} channels after "
                                 f"{self.min_val.shape[0]}; one observer watches one tensor")
            low, high = np.minimum(self.min_val.numpy(), low), np.maximum(self.max_val.numpy(), high)
        self.min_val, self.max_val = tensor(low), tensor(high)


class HistogramObserver(ObserverBase):
    """A histogram of the observed values; the clipping range minimises the quantization error.

    Clipping a few outliers makes the step finer for everything else; ``method``
    chooses how much to clip:

    * ``"mse"``: the range (searched over a grid of shrunken minima and maxima)
      minimising the squared error of quantizing the histogram's bin centres
      (clipping outside the range, rounding inside; ``scale**2 / 12`` for a grid
      finer than the bins).
    * ``"percentile"``: the range between the ``100 - percentile`` and
      ``percentile`` percentiles of the observed values.

    When a batch reaches beyond the current range, the histogram is widened and
    its counts are spread over the new bins in proportion to their overlap.

    Args:
        bins: number of histogram bins.
        method: ``"mse"`` or ``"percentile"``.
        percentile: the upper percentile kept by ``method="percentile"``.
        **kwargs: as `ObserverBase`.
    """

    def __init__(self, bins=2048, method="mse", percentile=99.99, **kwargs):
        super().__init__(**kwargs)
        if method not in ("mse", "percentile"):
            raise ShapeError(f"HistogramObserver: method must be 'mse' or 'percentile', got {method!r}")
        if not 50 < percentile <= 100:
            raise ShapeError(f"HistogramObserver: percentile must be in (50, 100], got {percentile}")
        self.bins, self.method, self.percentile = bins, method, percentile
        self._init_running()
        self.register_buffer("histogram", tensor(np.zeros(bins, np.float64)))

    def observe(self, data):
        xp = _xp(data)
        low, high = _extremes(xp, data)
        old_low, old_high = float(self.min_val.numpy()), float(self.max_val.numpy())
        new_low, new_high = min(old_low, float(low)), max(old_high, float(high))
        counts = self.histogram.numpy()
        if old_high > old_low and (new_low, new_high) != (old_low, old_high):
            counts = _rebin(counts, old_low, old_high, new_low, new_high)
        # NOTE: batches before the range had a width (all values equal) add no counts.
        if new_high > new_low:
            fresh = xp.histogram(data.astype(np.float32, copy=False), self.bins, (new_low, new_high))[0]
            counts = counts + np.asarray(fresh.get() if hasattr(fresh, "get") else fresh, np.float64)
        self.histogram._data[...] = counts
        self._set_running(new_low, new_high)

    def clipping_range(self):
        low, high = self.min_val.numpy(), self.max_val.numpy()
        counts = self.histogram.numpy()
        if not high > low or counts.sum() == 0:
            return low, high
        edges = np.linspace(float(low), float(high), self.bins + 1)
        if self.method == "percentile":
            cumulative = np.concatenate([[0.0], np.cumsum(counts)]) / counts.sum()
            tail = 1 - self.percentile / 100
            lo, hi = np.interp([tail, 1 - tail], cumulative, edges)
            return np.float32(lo), np.float32(hi)
        return self._mse_range(counts, edges, low, high)

    def _mse_range(self, counts, edges, low, high):
        centers = (edges[:-1] + edges[1:]) / 2
        width = edges[1] - edges[0]
        shrink = np.linspace(1.0, 0.1, 31)
        if self.qscheme.endswith("symmetric"):
            bound = max(-float(low), float(high))
            lows, highs = -bound * shrink, bound * shrink
        else:
            grid_low, grid_high = np.meshgrid(min(float(low), 0.0) * shrink, max(float(high), 0.0) * shrink)
            lows, highs = grid_low.ravel(), grid_high.ravel()
        scale, zero_point = qparams_from_range(lows.astype(np.float32), highs.astype(np.float32), self.dtype,
                                               self.qscheme, self.quant_min, self.quant_max)
        scale, zero_point = scale.astype(np.float64)[:, None], zero_point[:, None]
        q = np.clip(np.rint(centers / scale + zero_point), self.quant_min, self.quant_max)
        error = (centers - (q - zero_point) * scale) ** 2  # clipping and rounding of each bin's values
        # NOTE: a grid finer than the bins rounds a bin's values all ways: the uniform error scale**2 / 12.
        inside = (q > self.quant_min) & (q < self.quant_max)
        error = np.where(inside & (scale < width), scale ** 2 / 12, error)
        best = int(np.argmin((counts * error).sum(axis=1)))  # the first minimum: the widest range among equals
        return np.float32(lows[best]), np.float32(highs[best])

    def extra_repr(self):
        return f"{super().extra_repr()}, bins={self.bins}, method={self.method!r}"


def _rebin(counts, old_low, old_high, new_low, new_high):
    """``counts`` over ``[old_low, old_high]`` spread over as many bins on ``[new_low, new_high]``."""
    bins = counts.shape[0]
    old_edges = np.linspace(float(old_low), float(old_high), bins + 1)
    new_edges = np.linspace(float(new_low), float(new_high), bins + 1)
    cumulative = np.concatenate([[0.0], np.cumsum(counts)])
    return np.diff(np.interp(new_edges, old_edges, cumulative))


__all__ = ["Factory", "HistogramObserver", "MinMaxObserver", "MovingAverageMinMaxObserver", "ObserverBase",
           "PerChannelMinMaxObserver", "QUANT_DTYPES", "qparams_from_range"]
