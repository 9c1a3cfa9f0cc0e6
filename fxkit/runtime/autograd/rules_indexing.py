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
def _gather(ctx, g, a, dim, index):
    return _scatter_add(_zeros_as(a, g), dim, index, g)


@defgrad("scatter", saves=("index",))
def _scatter(ctx, g, a, dim, index, src=None, value=None):
    ga = g.scatter(dim, index, value=0.0) if ctx.needs(a) else None
    gsrc = _fit(g.gather(dim, index), tuple(src.shape)) if src is not None and ctx.needs(src) else None
    return ga, None, None, gsrc


@defgrad("scatter_add", saves=("index",))
def _scatter_add_grad(ctx, g, a, dim, index, src):
    return g, None, None, (_fit(g.gather(dim, index), tuple(src.shape)) if ctx.needs(src) else None)


@defgrad("index_select", saves=("index",))
def _index_select(ctx, g, a, dim, index):
    if a.ndim == 0:
        return g.sum()
    return _index_add(_zeros_as(a, g), dim, index, g)


@defgrad("index_add", saves=("index",))
def _index_add_grad(ctx, g, a, dim, index, source, alpha=1):
    if not ctx.needs(source):
        return g
    gsource = g.index_select(dim, index)
    return g, None, None, (gsource if alpha == 1 else gsource * alpha)


@defgrad("tril")
def _tril(ctx, g, a, diagonal=0):
    return g.tril(diagonal)


@defgrad("triu")
def _triu(ctx, g, a, diagonal=0):
    return g.triu(diagonal)
