"""Derivative rules of matmul, mm, bmm, linear, addmm, baddbmm and einsum.

Every gradient is again a matrix product on BLAS; broadcast batch dims are
summed by the engine (`conform`). einsum's gradient of an operand is an
einsum of the output's gradient with the other operands, then spread over
the letters only that operand has (expand) and onto its diagonals (repeated
letters, through identity matrices).
"""
import string

from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.ops.einsum_plan import cached_plan
from fxkit.runtime.ops.linalg import _einsum_operands
from fxkit.runtime.registry import get_op

_einsum = get_op("einsum")
_arange = get_op("arange")


def _mT(x):
    return x.transpose(-1, -2)


@defgrad("matmul", saves=("input", "other"))
def _matmul(ctx, g, input, other):  # noqa: A002
    if input.ndim == 1 and other.ndim == 1:
        return (g * other if ctx.needs(input) else None), (g * input if ctx.needs(other) else None)
    a2 = input.unsqueeze(0) if input.ndim == 1 else input
    b2 = other.unsqueeze(-1) if other.ndim == 1 else other
    g2 = g.unsqueeze(-2) if input.ndim == 1 else g
    g2 = g2.unsqueeze(-1) if other.ndim == 1 else g2
    ga = gb = None
    if ctx.needs(input):
        ga = g2.matmul(_mT(b2))
        ga = ga.squeeze(-2) if input.ndim == 1 else ga
    if ctx.needs(other):
        gb = _mT(a2).matmul(g2)
        gb = gb.squeeze(-1) if other.ndim == 1 else gb
    return ga, gb


@defgrad("mm", saves=("input", "mat2"))
def _mm(ctx, g, input, mat2):  # noqa: A002
    return (g.mm(mat2.t()) if ctx.needs(input) else None), (input.t().mm(g) if ctx.needs(mat2) else None)


@defgrad("bmm", saves=("input", "mat2"))
def _bmm(ctx, g, input, mat2):  # noqa: A002
    return (g.bmm(_mT(mat2)) if ctx.needs(input) else None), (_mT(input).bmm(g) if ctx.needs(mat2) else None)


@defgrad("linear", saves=("input", "weight"))
def _linear(ctx, g, input, weight, bias=None):  # noqa: A002
    gx = gw = None
    if weight.ndim == 1:  # out = x @ weight, one output feature and no feature dim
        g1 = g.unsqueeze(-1)
        return (g1 * weight if ctx.needs(input) else None), (g1 * input if ctx.needs(weight) else None), g
    if ctx.needs(input):
        gx = g.matmul(weight)
    if ctx.needs(weight):
        out_features, in_features = weight.shape
        # leading dims fold into the batch; 2-D ones already are (two dispatches saved)
        rows = g if g.ndim == 2 else g.reshape(-1, out_features)
        gw = rows.t().mm(input if input.ndim == 2 else input.reshape(-1, in_features))
    return gx, gw, g


@defgrad("addmm", saves=("mat1", "mat2"))
def _addmm(ctx, g, input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    ginp = g * beta if ctx.needs(input) else None
    ga = g.mm(mat2.t()) * alpha if ctx.needs(mat1) else None
    gb = mat1.t().mm(g) * alpha if ctx.needs(mat2) else None
    return ginp, ga, gb


@defgrad("baddbmm", saves=("batch1", "batch2"))
def _baddbmm(ctx, g, input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    ginp = g * beta if ctx.needs(input) else None
    ga = g.bmm(_mT(batch2)) * alpha if ctx.needs(batch1) else None
    gb = _mT(batch1).bmm(g) * alpha if ctx.needs(batch2) else None
    return ginp, ga, gb


@defgrad("einsum", saves=("operands",))
def _einsum_grad(ctx, g, equation, *operands):
    listed = len(operands) == 1 and type(operands[0]) in (list, tuple)
    ops = _einsum_operands(operands)
    plan = cached_plan(equation, tuple(tuple(o.shape) for o in ops))
    grads = [_operand_grad(g, plan, ops, i) if ctx.needs(o) else None for i, o in enumerate(ops)]
    return None, ([grads] if listed else grads)


def _operand_grad(g, plan, ops, i):
    """The gradient of einsum operand ``i`` (see the module docstring)."""
    term, shape = plan.terms[i], tuple(ops[i].shape)
    others = [(plan.output, g)] + [(t, o) for j, (t, o) in enumerate(zip(plan.terms, ops)) if j != i]
    seen = set("".join(t for t, _ in others))
    unique = "".join(dict.fromkeys(term))
    size = {c: shape[term.index(c)] for c in unique}
    # letters the others carry at the operand's size; a size-1 (broadcast) letter sums away
    kept = "".join(c for c in unique if c in seen and not (size[c] == 1 and plan.sizes[c] != 1))
    grad = _einsum(",".join(t for t, _ in others) + "->" + kept, *[o for _, o in others])
    grad = grad.reshape(tuple(grad.shape[kept.index(c)] if c in kept else 1 for c in unique))
    grad = grad.expand(tuple(size[c] for c in unique))
    if unique == term:
        return grad
    # repeated letters: the gradient lies on the diagonal, spread there by identity matrices
    fresh = iter(c for c in string.ascii_letters if c not in term)
    target, eyes, spec = [], [], [unique]
    for k, c in enumerate(term):
        if c in term[:k]:
            f = next(fresh)
            target.append(f)
            spec.append(c + f)
            n = size[c]
            eyes.append((_arange(n, device=g.device).unsqueeze(1) == _arange(n, device=g.device)).to(g.dtype))
        else:
            target.append(c)
    return _einsum(",".join(spec) + "->" + "".join(target), grad, *eyes)
