"""Normalisation layers: `BatchNorm1d`, `BatchNorm2d`, `LayerNorm`, `GroupNorm`, `RMSNorm`,
`InstanceNorm1d`, `InstanceNorm2d`, with PyTorch's parameters, buffers and defaults."""
from fxkit.errors import ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty, ones, tensor, zeros
from fxkit.runtime.tensor import Tensor


class _BatchNorm(Module):
    """Batch normalisation over dimension 1, with PyTorch's running statistics.

    In training mode the batch statistics normalise the input and update the
    buffers ``running_mean``/``running_var`` (``running = (1 - momentum) *
    running + momentum * batch``; ``momentum=None`` gives a cumulative average)
    and ``num_batches_tracked``; in eval mode the running statistics are used.

    Args:
        num_features: channels C of the input.
        eps: added to the variance.
        momentum: weight of the batch statistics in the running ones; None
            for a cumulative average.
        affine: learn ``weight`` (ones) and ``bias`` (zeros) per channel.
        track_running_stats: keep running statistics; without them eval mode
            normalises with the batch statistics too.
        bias: learn the bias (when ``affine``).
    """

    _ranks = ()
    _shape_text = ""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(empty(num_features, device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(empty(num_features, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=_dt.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self):
        self.reset_running_stats()
        _reset_affine(self, self.affine)

    def forward(self, input):
        # NOTE: only concrete tensors are checked; a tracer's proxy has no rank to test.
        if isinstance(input, Tensor) and input._data.ndim not in self._ranks:
            raise ShapeError(f"{self._get_name()}: expected {self._shape_text} input, got a "
                             f"{input._data.ndim}-D input of shape {list(input.shape)}")
        training = self.training
        factor = 0.0 if self.momentum is None else self.momentum
        if training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        running_mean, running_var = self.running_mean, self.running_var
        use_batch_stats = training or (running_mean is None and running_var is None)
        if training and not self.track_running_stats:
            running_mean = running_var = None
        return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")

    def _init_kwargs(self):
        return {"num_features": self.num_features, "eps": self.eps, "momentum": self.momentum,
                "affine": self.affine, "track_running_stats": self.track_running_stats,
                "bias": self.affine and self.bias is not None}


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` inputs.

    Example:
        >>> nn.BatchNorm1d(16)(fxkit.randn(8, 16)).shape
        (8, 16)
    """

    _ranks = (2, 3)
    _shape_text = "a 2-D (N, C) or 3-D (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` inputs.

    Example:
        >>> nn.BatchNorm2d(16)(fxkit.randn(8, 16, 4, 4)).shape
        (8, 16, 4, 4)
    """

    _ranks = (4,)
    _shape_text = "a 4-D (N, C, H, W)"


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of ``(N, C, D, H, W)`` inputs (video models).

    Example:
        >>> nn.BatchNorm3d(16)(fxkit.randn(2, 16, 2, 4, 4)).shape
        (2, 16, 2, 4, 4)
    """

    _ranks = (5,)
    _shape_text = "a 5-D (N, C, D, H, W)"


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dimensions.

    Args:
        normalized_shape: int or tuple, the trailing dimensions normalised.
        eps: added to the variance.
        elementwise_affine: learn ``weight`` (ones) and ``bias`` (zeros) of
            shape ``normalized_shape``.
        bias: learn the bias (when ``elementwise_affine``).

    Example:
        >>> nn.LayerNorm(64)(fxkit.randn(2, 10, 64)).shape
        (2, 10, 64)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, elementwise_affine, bias, self.normalized_shape, device, dtype)

    def reset_parameters(self):
        _reset_affine(self, self.elementwise_affine)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")

    def _init_kwargs(self):
        return {"normalized_shape": list(self.normalized_shape), "eps": self.eps,
                "elementwise_affine": self.elementwise_affine,
                "bias": self.elementwise_affine and self.bias is not None}


class GroupNorm(Module):
    """Group normalisation of ``(N, C, *)`` inputs: ``num_groups`` groups of channels, each
    normalised over its channels and positions, then a per-channel affine map.

    Args:
        num_groups: groups the channels are divided into; must divide ``num_channels``.
        num_channels: channels C of the input.
        eps: added to the variance.
        affine: learn ``weight`` (ones) and ``bias`` (zeros) of shape ``(C,)``.
        bias: learn the bias (when ``affine``).

    Example:
        >>> nn.GroupNorm(4, 16)(fxkit.randn(2, 16, 8, 8)).shape
        (2, 16, 8, 8)
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, affine, bias, (num_channels,), device, dtype)

    def reset_parameters(self):
        _reset_affine(self, self.affine)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")

    def _init_kwargs(self):
        return {"num_groups": self.num_groups, "num_channels": self.num_channels, "eps": self.eps,
                "affine": self.affine, "bias": self.affine and self.bias is not None}


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dimensions (Llama, T5).

    Args:
        normalized_shape: int or tuple, the trailing dimensions normalised.
        eps: added to the mean square; None: the machine epsilon of the input's dtype.
        elementwise_affine: learn ``weight`` (ones) of shape ``normalized_shape``.

    Example:
        >>> nn.RMSNorm(64)(fxkit.randn(2, 10, 64)).shape
        (2, 10, 64)
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    def _init_kwargs(self):
        return {"normalized_shape": list(self.normalized_shape), "eps": self.eps,
                "elementwise_affine": self.elementwise_affine}


class _InstanceNorm(_BatchNorm):
    """Instance normalisation: each channel of each sample normalised over its positions.

    PyTorch's defaults differ from batch norm's: ``affine=False`` and
    ``track_running_stats=False``. With running statistics, training updates them
    (with the instances' average) and eval mode normalises with them; otherwise
    every call uses the instance statistics. Unbatched inputs ``(C, *)`` are accepted.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False,
                 device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input):
        if isinstance(input, Tensor) and input._data.ndim not in self._ranks + (self._ranks[0] - 1,):
            raise ShapeError(f"{self._get_name()}: expected {self._shape_text} input, got a "
                             f"{input._data.ndim}-D input of shape {list(input.shape)}")
        unbatched = input.ndim == self._ranks[0] - 1
        if unbatched:
            input = input.unsqueeze(0)
        use_input_stats = self.training or not self.track_running_stats
        momentum = self.momentum if self.momentum is not None else 0.0
        out = F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
                              momentum, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of ``(N, C, L)`` or unbatched ``(C, L)`` inputs.

    Example:
        >>> nn.InstanceNorm1d(16)(fxkit.randn(8, 16, 20)).shape
        (8, 16, 20)
    """

    _ranks = (3,)
    _shape_text = "a 2-D (C, L) or 3-D (N, C, L)"


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of ``(N, C, H, W)`` or unbatched ``(C, H, W)`` inputs.

    Example:
        >>> nn.InstanceNorm2d(16, affine=True)(fxkit.randn(2, 16, 8, 8)).shape
        (2, 16, 8, 8)
    """

    _ranks = (4,)
    _shape_text = "a 3-D (C, H, W) or 4-D (N, C, H, W)"


def _affine_parameters(module, affine, bias, shape, device, dtype):
    """``weight`` (ones) and ``bias`` (zeros) of ``shape`` when ``affine``, else None entries."""
    if affine:
        module.weight = Parameter(ones(*shape, device=device, dtype=dtype))
        if bias:
            module.bias = Parameter(zeros(*shape, device=device, dtype=dtype))
        else:
            module.register_parameter("bias", None)
    else:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)


def _reset_affine(module, affine):
    """Weight back to ones and bias to zeros, as at construction, when the layer is ``affine``."""
    if affine:
        init.ones_(module.weight)
        if module.bias is not None:
            init.zeros_(module.bias)
