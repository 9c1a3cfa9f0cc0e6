"""Derivative rules of the view and rearranging ops: each maps the output's gradient
back onto the input's layout (reshape back, inverse permutation, sum over repeats
and broadcast dims, split what cat joined, crop what pad added, unshuffle what
pixel_shuffle shuffled).
"""
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.ops.dims import normalize_dim
from fxkit.runtime.ops.rearrange import cat_layout, pad_layout
from fxkit.runtime.ops.shape_ops import positional_or_keyword, shape_arg
from fxkit.runtime.ops.unfold import window_layout
from fxkit.runtime.registry import get_op

_cat = get_op("cat")
_pad = get_op("pad")
_zeros = get_op("zeros")
_arange = get_op("arange")
_index_add = get_op("index_add")
_stack_op = get_op("stack")
_pixel_shuffle_op = get_op("pixel_shuffle")
_pixel_unshuffle_op = get_op("pixel_unshuffle")


def _reshape_back(name):
    @defgrad(name)
    def rule(ctx, g, input, *args, **kwargs):  # noqa: A002
        return g.reshape(tuple(input.shape))

    return rule


for _name in ("view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "contiguous"):
    _reshape_back(_name)


@defgrad("unfold")
def _unfold(ctx, g, input, dimension, size, step):  # noqa: A002
    """Each window's gradient added back where the window was cut, one window element at a time."""
    if not input.shape:
        return g.reshape(())
    axis, windows = window_layout(tuple(input.shape), dimension, size, step)
    starts = _arange(windows, device=g.device) * step
    out = _zeros(tuple(input.shape), dtype=g.dtype, device=g.device)
    for k in range(size):
        out = _index_add(out, axis, starts + k, g[..., k])
    return out


@defgrad("pixel_shuffle")
def _pixel_shuffle(ctx, g, input, upscale_factor):  # noqa: A002
    return _pixel_unshuffle_op(g, upscale_factor)


@defgrad("pixel_unshuffle")
def _pixel_unshuffle(ctx, g, input, downscale_factor):  # noqa: A002
    return _pixel_shuffle_op(g, downscale_factor)


@defgrad("expand")
def _expand(ctx, g, input, *sizes, size=None):  # noqa: A002
    return g  # the engine sums the broadcast dims back to a's shape


@defgrad("permute")
def _permute(ctx, g, input, *args, dims=None):  # noqa: A002
    perm = [normalize_dim(d, input.ndim, "permute")
            for d in shape_arg(positional_or_keyword(args, dims, "permute", "dims"), "permute")]
    inverse = [0] * len(perm)
    for i, d in enumerate(perm):
        inverse[d] = i
    return g.permute(inverse)


@defgrad("transpose")
def _transpose(ctx, g, input, dim0, dim1):  # noqa: A002
    return g.transpose(dim0, dim1)


@defgrad("t")
def _t(ctx, g, input):  # noqa: A002
    return g.t()


@defgrad("numpy_T")
def _numpy_t(ctx, g, input):  # noqa: A002
    return g.T


@defgrad("narrow")
def _narrow(ctx, g, input, dim, start, length):  # noqa: A002
    d = normalize_dim(dim, input.ndim, "narrow")
    n = input.shape[d]
    start = start + n if start < 0 else start
    return _pad(g, [0, 0] * (input.ndim - 1 - d) + [start, n - start - length])


@defgrad("split")
def _split(ctx, g, input, split_size, dim=0):  # noqa: A002
    return _cat(list(g), dim)


@defgrad("chunk")
def _chunk(ctx, g, input, chunks, dim=0):  # noqa: A002
    return _cat(list(g), dim)


@defgrad("cat")
def _cat_grad(ctx, g, tensors, dim=0):
    d, _, kept = cat_layout([t.shape for t in tensors], dim)
    pieces = iter(g.split([tensors[i].shape[d] for i in kept], d))
    return [next(pieces) if i in kept else _zeros(t.shape, dtype=g.dtype, device=g.device)
            for i, t in enumerate(tensors)], None


@defgrad("stack")
def _stack(ctx, g, tensors, dim=0):
    d = normalize_dim(dim, tensors[0].ndim + 1, "stack")
    head = (slice(None),) * d
    return [g[head + (i,)] for i in range(len(tensors))], None


def _unrepeat(g, shape, sizes):
    """The gradient of ``tile(x, sizes)`` for ``x`` of ``shape``: the sum over the copies."""
    full = (1,) * (len(sizes) - len(shape)) + tuple(shape)
    interleaved = [n for pair in zip(sizes, full) for n in pair]
    return g.reshape(interleaved).sum(tuple(range(0, 2 * len(full), 2))).reshape(tuple(shape))


@defgrad("repeat")
def _repeat(ctx, g, input, *sizes, repeats=None):  # noqa: A002
    return _unrepeat(g, input.shape, shape_arg(positional_or_keyword(sizes, repeats, "repeat", "repeats"), "repeat"))


@defgrad("tile")
def _tile(ctx, g, input, *args, dims=None):  # noqa: A002
    dims = shape_arg(positional_or_keyword(args, dims, "tile", "dims"), "tile")
    return _unrepeat(g, input.shape, (1,) * (input.ndim - len(dims)) + dims)


@defgrad("flip")
def _flip(ctx, g, input, *args, dims=None):  # noqa: A002
    return g.flip(*args) if dims is None else g.flip(dims=dims)


@defgrad("roll")
def _roll(ctx, g, input, shifts, dims=None):  # noqa: A002
    back = tuple(-s for s in shifts) if isinstance(shifts, (tuple, list)) else -shifts
    return g.roll(back, dims)


@defgrad("pad")
def _pad_grad(ctx, g, input, pad, mode="constant", value=None):  # noqa: A002
    if mode == "constant":
        return _pad(g, [-p for p in shape_arg((pad,), "pad")])
    # reflect/replicate/circular: each padded dim took entries by an index map; add them back.
    # The map is pad itself applied to 0..n-1 (the forward's own rule, so they cannot disagree).
    plan, _ = pad_layout(tuple(input.shape), pad, mode, value)
    shape = list(input.shape)
    steps = []
    for d, lo, hi in plan:
        steps.append((d, shape[d], lo, hi, tuple(shape)))
        shape[d] = shape[d] + lo + hi
    for d, n, lo, hi, before in reversed(steps):
        index = _pad(_arange(n, device=g.device), [lo, hi], mode=mode)
        g = _index_add(_zeros(before, dtype=g.dtype, device=g.device), d, index, g)
    return g


@defgrad("swapaxes")
def _swapaxes(ctx, g, input, axis0, axis1):  # noqa: A002
    return g.transpose(axis0, axis1)


@defgrad("swapdims")
def _swapdims(ctx, g, input, dim0, dim1):  # noqa: A002
    return g.transpose(dim0, dim1)


@defgrad("unbind")
def _unbind(ctx, g, input, dim=0):  # noqa: A002
    return _stack_op(list(g), dim)
