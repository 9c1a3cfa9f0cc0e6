"""`record`: what Op dispatch runs when an argument takes part in autograd.

``Op.__call__`` hands a call here only when some tensor argument carries
autograd state (``Tensor._grad is not None``) and grad mode is on (or the op
writes into an argument), so calls on plain tensors never reach this module.
"""
from fxkit.runtime.autograd import grad_mode
from fxkit.runtime.autograd.autograd_meta import AutogradMeta, bump_version
from fxkit.runtime.autograd.function import (GradRule, NonDifferentiable, flat_outputs, forward_untracked,
                                             iter_tensors, make_node, shares_storage)
from fxkit.runtime.autograd.inplace import apply_inplace, run_mutating
from fxkit.runtime.tensor import Tensor

_GRAD = grad_mode.ENABLED


def record(op, args, kwargs):
    """Run ``op(*args, **kwargs)``; when an input requires grad, record it in the graph."""
    rule = op.grad_rule
    needs = False
    blocked = None
    for _, t in iter_tensors(args, kwargs):
        meta = t._grad
        if meta is not None:
            if meta.requires_grad:
                needs = True
            elif blocked is None:
                blocked = meta.blocked_by
    writes = type(rule) is GradRule and (rule.mutates or (rule.inplace_kw and kwargs.get("inplace") is True))
    if writes:
        if rule.mutates:
            return run_mutating(op, args, kwargs, needs and _GRAD[0])
        if needs and _GRAD[0]:
            return apply_inplace(op, args[0], args[1:], {**kwargs, "inplace": False}, op.name)
        out = forward_untracked(op, args, kwargs)
        bump_version(args[0])
        return out
    if not needs or not _GRAD[0]:
        out = forward_untracked(op, args, kwargs)
        _mark_untracked(out, args, kwargs, blocked)
        return out
    if type(rule) is NonDifferentiable:
        out = forward_untracked(op, args, kwargs)
        _mark_untracked(out, args, kwargs, op.name)
        return out
    extra = None
    if rule is not None and rule.forward is not None:
        previous = _GRAD[0]
        _GRAD[0] = False
        try:
            out, extra = rule.forward(op, args, kwargs)
        finally:
            _GRAD[0] = previous
    else:
        out = forward_untracked(op, args, kwargs)
    make_node(op, rule, args, kwargs, out, extra)
    return out


def _mark_untracked(out, args, kwargs, blocked):
    """Results that need no grad: a view shares the version counter of the tensor it
    aliases (in-place writes through it are seen), and a value that came through a
    non-differentiable op remembers that op for the error asking for its gradient."""
    metas = [t for _, t in iter_tensors(args, kwargs) if t._grad is not None]
    for o in flat_outputs(out):
        if not isinstance(o, Tensor) or o._grad is not None:
            continue
        source = next((t for t in metas if shares_storage(o._data, t._data)), None)
        if source is not None:
            o._grad = AutogradMeta(version=source._grad.version, is_view=True, blocked_by=blocked)
        elif blocked is not None:
            o._grad = AutogradMeta(blocked_by=blocked)
