"""Derivative rules of indexing: getitem, setitem, gather, scatter, index_select,
tril/triu, and of scatter_add and index_add.

A read at an index sends its gradient back to the indexed positions
(``getitem_backward``, ``scatter_add``, ``index_add``: repeated indices add up);
a write at an index stops the gradient of the overwritten values.
"""
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.registry import get_op

_getitem_backward = get_op("getitem_backward")
_index_add = get_op("index_add")
_pad = get_op("pad")
_scatter_add = get_op("scatter_add")
_zeros = get_op("zeros")
_ones_like = get_op("ones_like")


def _zeros_as(like, g):
    return _zeros(tuple(like.shape), dtype=g.dtype, device=g.device)


def _fit(grad, shape):
    """``grad`` (the shape of an index) padded with zeros at the end to ``shape``."""
    amounts = []
    for have, want in reversed(list(zip(grad.shape, shape))):
        amounts += [0, want - have]
    return _pad(grad, amounts) if any(amounts) else grad


@defgrad("getitem", saves=("index",))
def _getitem(ctx, g, a, index):
    if type(a) in (list, tuple):  # an item (or a slice) of a sequence of tensors (TensorMeta is a tuple too)
        picked = list(range(len(a)))[index]
        grads = [None] * len(a)
        for k, grad in ([(picked, g)] if isinstance(picked, int) else zip(picked, g)):
            grads[k] = grad
        return grads, None
    return _getitem_backward(g, tuple(a.shape), index)


@defgrad("setitem", saves=("index",), mutates=True)
def _setitem(ctx, g, a, index, value):
    ga = None
    if ctx.needs(a):
        ga = g + 0.0  # a fresh copy to write into
        ga[index] = 0.0
    return ga, None, (g[index] if ctx.needs(value) else None)


@defgrad("gather", saves=("index",))
def _gather(ctx, g, input, dim, index):  # noqa: A002
    return _scatter_add(_zeros_as(input, g), dim, index, g)


@defgrad("scatter", saves=("index", "src"), out=True)
def _scatter(ctx, g, input, dim, index, src=None, value=None, reduce=None):  # noqa: A002
    needs_src = src is not None and hasattr(src, "shape") and ctx.needs(src)
    if reduce is None:
        ga = g.scatter(dim, index, value=0.0) if ctx.needs(input) else None
        gsrc = _fit(g.gather(dim, index), tuple(src.shape)) if needs_src else None
    elif reduce == "add":
        ga, gsrc = g, (_fit(g.gather(dim, index), tuple(src.shape)) if needs_src else None)
    else:
        # out = a * (the product of what lands there): d out / d a is that product, and each
        # factor's derivative is the rest of it times a, i.e. out / factor.
        factors = _ones_like(g).scatter(dim, index, src, value, reduce="multiply")
        ga = g * factors if ctx.needs(input) else None
        gsrc = None
        if needs_src:
            block = src[tuple(slice(0, s) for s in index.shape)]
            gsrc = _fit((g * ctx.out).gather(dim, index) / block, tuple(src.shape))
    return ga, None, None, gsrc


@defgrad("scatter_add", saves=("index",))
def _scatter_add_grad(ctx, g, input, dim, index, src):  # noqa: A002
    return g, None, None, (_fit(g.gather(dim, index), tuple(src.shape)) if ctx.needs(src) else None)


@defgrad("index_select", saves=("index",))
def _index_select(ctx, g, input, dim, index):  # noqa: A002
    if input.ndim == 0:
        return g.sum()
    return _index_add(_zeros_as(input, g), dim, index, g)


@defgrad("index_add", saves=("index",))
def _index_add_grad(ctx, g, input, dim, index, source, alpha=1):  # noqa: A002
    if not ctx.needs(source):
        return g
    gsource = g.index_select(dim, index)
    return g, None, None, (gsource if alpha == 1 else gsource * alpha)


@defgrad("tril")
def _tril(ctx, g, input, diagonal=0):  # noqa: A002
    return g.tril(diagonal)


@defgrad("triu")
def _triu(ctx, g, input, diagonal=0):  # noqa: A002
    return g.triu(diagonal)


def _index_of(indices):
    return tuple(slice(None) if i is None else i for i in indices)


@defgrad("index_put", saves=("indices",))
def _index_put(ctx, g, input, indices, values, accumulate=False):  # noqa: A002
    index = _index_of(indices)
    ga = None
    if ctx.needs(input):
        ga = g if accumulate else g.index_put(indices, _zeros((), dtype=g.dtype, device=g.device))
    gvalues = g[index] if hasattr(values, "shape") and ctx.needs(values) else None
    return ga, None, gvalues
