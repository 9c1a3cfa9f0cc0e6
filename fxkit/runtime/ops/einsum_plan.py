"""Planning and running ``einsum`` so that it reaches BLAS.

numpy's ``einsum(..., optimize=True)`` only calls BLAS (through
``tensordot``) when no index is shared by both operands and the output, so a
batched product like ``"bhqd,bhkd->bhqk"`` falls back to its scalar loop.
fxkit contracts operand pairs the way PyTorch does instead: indices seen
only in one operand are summed first, the rest are permuted into
``(batch..., rows, contracted)`` and ``(batch..., contracted, cols)`` and
multiplied with ``matmul``. Equations with a repeated index in one operand
(``"ii->i"``, traces) and single-operand equations go to ``xp.einsum``.

`plan_einsum` does the parsing and shape checks (it also serves the shape
rule, so it works on symbolic dims); `contract` runs a plan.
"""
import functools
import math
import string
from collections import Counter
from typing import NamedTuple

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import same_dim


class EinsumPlan(NamedTuple):
    """An equation with ``...`` spelled out as letters, and the size of every letter."""

    terms: tuple  # subscripts of each operand, one letter per dimension
    output: str  # subscripts of the result
    sizes: dict  # letter -> size after broadcasting size-1 dims
    out_shape: tuple


def _is_one(d):
    return isinstance(d, int) and d == 1


def _split(equation, count):
    if not isinstance(equation, str):
        raise DTypeError(f"einsum(): the equation must be a string like 'ij,jk->ik', got {equation!r}")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    bad = sorted({c for c in eq if not (c in string.ascii_letters or c in ".,->")})
    if bad or "->" in rhs:
        raise ShapeError(f"einsum(): invalid equation {equation!r}; subscripts are letters a-z, A-Z, "
                         f"operands are separated by ',' and '->' comes once")
    terms = lhs.split(",")
    if len(terms) != count:
        raise ShapeError(f"einsum(): the equation {equation!r} names {len(terms)} operand(s) "
                         f"but {count} were given")
    for t in terms + ([rhs] if arrow else []):
        if t.count("...") > 1 or "." in t.replace("...", "", 1):
            raise ShapeError(f"einsum(): invalid ellipsis in {t!r} of {equation!r}; use '...' at most once a term")
    return lhs, terms, (rhs if arrow else None)


def plan_einsum(equation, shapes):
    """Parse ``equation`` against the operands' ``shapes``: expand ``...``, infer an
    implicit output (the letters seen once, sorted, after the ellipsis dims), check sizes."""
    lhs, terms, rhs = _split(equation, len(shapes))
    pool = [c for c in string.ascii_letters if c not in equation]
    extra = []
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        named = len(term) - 3 if "..." in term else len(term)
        if len(shape) < named or ("..." not in term and len(shape) != named):
            raise ShapeError(f"einsum(): the subscripts {term!r} of operand {i} name {named} dimension(s) "
                             f"but the operand has {len(shape)} (shape {list(shape)})")
        extra.append(len(shape) - named)
    ellipsis = "".join(pool[:max(extra, default=0)])
    terms = tuple(t.replace("...", ellipsis[len(ellipsis) - n:]) for t, n in zip(terms, extra))
    if rhs is None:
        seen = Counter(c for c in lhs if c in string.ascii_letters)
        output = ellipsis + "".join(sorted(c for c, k in seen.items() if k == 1))
    else:
        output = rhs.replace("...", ellipsis)
    sizes = {}
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        for c, d in zip(term, shape):
            seen_size = sizes.get(c)
            if seen_size is None or _is_one(seen_size):
                sizes[c] = d
            elif not _is_one(d) and not same_dim(d, seen_size):
                raise ShapeError(f"einsum(): subscript {c} has size {d} for operand {i} which does not "
                                 f"broadcast with previously seen size {seen_size} (equation {equation!r}, "
                                 f"shapes {[list(s) for s in shapes]})")
    for c in output:
        if c not in sizes or output.count(c) > 1:
            raise ShapeError(f"einsum(): output subscript {c} in {equation!r} must appear once in the "
                             f"output and at least once in the inputs")
    return EinsumPlan(terms, output, sizes, tuple(sizes[c] for c in output))


@functools.lru_cache(maxsize=512)
def cached_plan(equation, shapes):
    """`plan_einsum` for concrete shapes (a tuple of int tuples), reused across eager calls."""
    return plan_einsum(equation, shapes)


def contract(xp, plan, operands):
    """Run ``plan`` over ``operands``: pairwise ``matmul`` contractions, left to right."""
    terms = plan.terms
    if len(operands) == 1 or any(len(set(t)) != len(t) for t in terms):
        return xp.einsum(",".join(terms) + "->" + plan.output, *operands, optimize=len(operands) > 2)
    out, term = operands[0], terms[0]
    for i in range(1, len(operands)):
        keep = set(plan.output).union(*terms[i + 1:])
        out, term = _pair(xp, out, term, operands[i], terms[i], keep)
    if term != plan.output:
        out = out.transpose([term.index(c) for c in plan.output])
    return out


def _drop(a, term, letters, squeeze=False):
    """Sum (or squeeze, for size-1 dims) the dims named by ``letters`` out of ``a``."""
    if not letters:
        return a, term
    axes = tuple(term.index(c) for c in letters)
    a = a.squeeze(axes) if squeeze else a.sum(axis=axes, dtype=a.dtype)
    return a, "".join(c for c in term if c not in letters)


def _pair(xp, a, ta, b, tb, keep):
    """Contract two operands into one whose letters are those of ``keep`` they hold."""
    shared = [c for c in ta if c in tb and c not in keep]
    # A contracted dim of size 1 on one side broadcasts: squeeze it there, sum it on the other.
    ones_a = [c for c in shared if a.shape[ta.index(c)] == 1 != b.shape[tb.index(c)]]
    ones_b = [c for c in shared if b.shape[tb.index(c)] == 1 != a.shape[ta.index(c)]]
    a, ta = _drop(a, ta, ones_a, squeeze=True)
    b, tb = _drop(b, tb, ones_b, squeeze=True)
    a, ta = _drop(a, ta, [c for c in ta if c not in tb and c not in keep])
    b, tb = _drop(b, tb, [c for c in tb if c not in ta and c not in keep])
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    a = a.transpose([ta.index(c) for c in batch + left + summed])
    b = b.transpose([tb.index(c) for c in batch + summed + right])
    nb, nl, nr = len(batch), len(left), len(right)
    rows, inner, cols = a.shape[nb:nb + nl], a.shape[nb + nl:], b.shape[b.ndim - nr:]
    a = a.reshape(a.shape[:nb] + (math.prod(rows), math.prod(inner)))
    b = b.reshape(b.shape[:nb] + (math.prod(inner), math.prod(cols)))
    out = xp.matmul(a, b)
    return out.reshape(out.shape[:nb] + rows + cols), "".join(batch + left + right)
