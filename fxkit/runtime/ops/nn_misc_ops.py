"""Dropout, embedding lookup and one-hot encoding, as in ``torch.nn.functional``.

Dropout draws from the shared generator of `fxkit.runtime.ops.factories`,
so ``fxkit.manual_seed`` makes it reproducible.
"""
import numpy as np

from fxkit.errors import IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.factories import generator
from fxkit.runtime.ops.low_precision import scalar, widen
from fxkit.runtime.ops.nn_checks import check_probability, require_float, require_integer, shown


def _dropout(xp, x, p, inplace, mask_shape):
    """Zero entries of ``x`` where a uniform draw over ``mask_shape`` (broadcast
    onto ``x``) falls below ``p``; scale the kept ones by ``1 / (1 - p)``."""
    if p == 1:
        if inplace:
            x[...] = 0
            return x
        return xp.zeros_like(x)
    keep = generator(xp).random(mask_shape, dtype=np.float32) >= p
    # NOTE: in the input's dtype, as PyTorch's noise tensor holds it (a Python float would
    # make numpy upcast a bfloat16 input to float32).
    scale = scalar(1.0 / (1.0 - p), x.dtype)
    if inplace:
        x *= scale
        x *= keep
        return x
    out = xp.multiply(x, scale)
    out *= keep
    return out


def _dropout_rule(input, p=0.5, training=True, inplace=False):
    check_probability("dropout", p)
    if training and p:
        require_float("dropout", input)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("dropout", kind="random", method=False, pure=False, shape_rule=_dropout_rule)
def dropout(xp, input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Returns the input's data itself (no copy) when not training or when
    ``p == 0``, like PyTorch; ``inplace=True`` writes into ``input``.

    Example:
        >>> y = fxkit.ops.dropout(x, 0.1, training=True)
    """
    check_probability("dropout", p)
    if not training or p == 0:
        return input
    require_float("dropout", input)
    return _dropout(xp, input, p, inplace, input.shape)


def _check_dropout2d(input, p, training):
    check_probability("dropout2d", p)
    if training and p:
        if len(input.shape) < 2:
            raise ShapeError(f"dropout2d: channel-wise dropout needs an input of rank >= 2 (N, C, *), got shape "
                             f"{shown(input.shape)}; use dropout for element-wise dropout")
        require_float("dropout2d", input)


def _dropout2d_rule(input, p=0.5, training=True, inplace=False):
    _check_dropout2d(input, p, training)
    return TensorMeta(input.shape, input.dtype, input.device)


@op("dropout2d", kind="random", method=False, pure=False, shape_rule=_dropout2d_rule)
def dropout2d(xp, input, p=0.5, training=True, inplace=False):
    """Zero whole channels: each ``input[n, c]`` is zeroed with probability ``p``
    and the kept channels are scaled by ``1 / (1 - p)``.

    Like PyTorch, the first two dimensions are (N, C) whatever the rank, so a
    3-D input is read as (N, C, L), not as an unbatched (C, H, W).

    Example:
        >>> y = fxkit.ops.dropout2d(x, 0.2)  # x: (N, C, H, W)
    """
    _check_dropout2d(input, p, training)
    if not training or p == 0:
        return input
    return _dropout(xp, input, p, inplace, input.shape[:2] + (1,) * (input.ndim - 2))


def _check_embedding(input, weight, padding_idx):
    require_integer("embedding", input, "input")
    if len(weight.shape) != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape "
                         f"{shown(weight.shape)}")
    num = weight.shape[0]
    if padding_idx is not None and isinstance(num, int) and not -num <= padding_idx < num:
        raise IndexOutOfRangeError(f"embedding: padding_idx={padding_idx} must be within num_embeddings={num} "
                                   f"(in [{-num}, {num - 1}])")


def _embedding_rule(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                    sparse=False):
    _check_embedding(input, weight, padding_idx)
    return TensorMeta(tuple(input.shape) + (weight.shape[1],), weight.dtype, weight.device)


@op("embedding", kind="other", method=False, shape_rule=_embedding_rule)
def embedding(xp, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the indices ``input``.

    ``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` only shape the
    gradient, as in PyTorch; the forward result does not depend on them.
    With ``max_norm``, the referenced rows whose ``norm_type``-norm exceeds it
    are rescaled in place in ``weight`` first, as PyTorch does. The op stays
    registered pure like in torch.fx: an embedding whose result is unused may
    be removed together with that renormalisation.

    Example:
        >>> vectors = fxkit.ops.embedding(token_ids, table)  # (B, T) -> (B, T, D)
    """
    _check_embedding(input, weight, padding_idx)
    num = weight.shape[0]
    if input.size:
        low, high = int(input.min()), int(input.max())
        if low < 0 or high >= num:
            bad = low if low < 0 else high
            raise IndexOutOfRangeError(f"embedding: index {bad} is out of range for num_embeddings={num} "
                                       f"(weight of shape {shown(weight.shape)}); valid indices are 0..{num - 1}")
    if max_norm is not None:
        require_float("embedding", weight, "weight")  # rescaling would truncate integer rows
        rows = xp.unique(input)
        norms = xp.linalg.norm(widen(weight[rows]), ord=norm_type, axis=1)  # bfloat16 sums in float32
        over = norms > max_norm
        rows, norms = rows[over], norms[over]
        weight[rows] *= (max_norm / (norms + 1e-7))[:, None].astype(weight.dtype, copy=False)
    return weight[input]


def _check_one_hot(tensor, num_classes):
    require_integer("one_hot", tensor, "tensor")
    if num_classes != -1 and (not isinstance(num_classes, int) or num_classes < 0):
        raise ShapeError(f"one_hot: num_classes must be -1 (inferred) or a non-negative int, got {num_classes!r}")


def _one_hot_rule(input, num_classes=-1):
    _check_one_hot(input, num_classes)
    if num_classes == -1:
        raise ShapeError("one_hot: with num_classes=-1 the output size is the largest value + 1, which depends "
                         "on the data; pass num_classes explicitly to infer shapes without running")
    return TensorMeta(tuple(input.shape) + (num_classes,), _dt.int64, input.device)


@op("one_hot", kind="other", method=False, shape_rule=_one_hot_rule)
def one_hot(xp, input, num_classes=-1):
    """An int64 tensor of shape ``(*tensor.shape, num_classes)`` with a 1 at each
    index of ``tensor`` and 0 elsewhere; ``num_classes=-1`` uses ``tensor.max() + 1``.

    Example:
        >>> fxkit.ops.one_hot(fxkit.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
    _check_one_hot(input, num_classes)
    if input.size:
        low, high = int(input.min()), int(input.max())
        if low < 0:
            raise IndexOutOfRangeError(f"one_hot: class values must be non-negative, got {low}")
        if num_classes == -1:
            num_classes = high + 1
        elif high >= num_classes:
            raise IndexOutOfRangeError(f"one_hot: class values must be smaller than num_classes={num_classes}, "
                                       f"got {high}")
    elif num_classes == -1:
        raise ShapeError(f"one_hot: cannot infer num_classes from an empty tensor (shape {shown(input.shape)}); "
                         f"pass num_classes")
    out = xp.zeros((input.size, num_classes), dtype=np.int64)
    out[xp.arange(input.size), input.reshape(-1)] = 1
    return out.reshape(tuple(input.shape) + (num_classes,))
