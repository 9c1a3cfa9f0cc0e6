"""``fxkit.nn.functional``: ``torch.nn.functional``'s names for fxkit's ops.

Every name here IS the registered op (``F.relu is fxkit.ops.relu``), not a
wrapper, so a traced ``F.relu(x)`` records the same ``call[relu]`` node as
``x.relu()`` and ``fxkit.relu(x)``. The ops take PyTorch's signatures and
defaults.

Example:
    >>> import fxkit.nn.functional as F
    >>> F.log_softmax(F.linear(x, w, b), dim=1)
"""
from fxkit.runtime.registry import all_ops, get_op

__all__ = [
    # activations
    "relu", "relu6", "hardsigmoid", "hardswish", "mish", "leaky_relu", "gelu", "silu", "sigmoid", "tanh",
    "softmax", "log_softmax", "glu",
    # linear and convolution
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose2d",
    # pooling and resampling
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool2d",
    "interpolate", "pad", "pixel_shuffle", "pixel_unshuffle",
    # normalisation, dropout, embeddings
    "batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "dropout", "dropout2d", "embedding",
    "one_hot",
    # attention
    "scaled_dot_product_attention",
    # losses
    "cross_entropy", "nll_loss", "mse_loss",
]

globals().update({op.name: op for op in all_ops() if op.name in __all__})


def __getattr__(name):
    # NOTE: binds ops registered after this module was imported; a name whose op
    # is not registered at all gets the registry's error naming close matches.
    if name in __all__:
        return get_op(name)
    raise AttributeError(f"module 'fxkit.nn.functional' has no attribute {name!r}")
