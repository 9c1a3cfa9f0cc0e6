"""`record`: what Op dispatch runs when an argument takes part in autograd.

``Op.__call__`` hands a call here only when some tensor argument carries
autograd state (``Tensor._grad is not None``) and grad mode is on, so calls on
plain tensors, and every call under ``no_grad``, never reach this module.
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
    found = iter_tensors(args, kwargs)
    for _, t in found:
        meta = t._grad
        if meta is not None:
            if meta.requires_grad:
                needs = True
            elif blocked is None:
                blocked = meta.blocked_by
    if type(rule) is GradRule:
        if rule.mutates:
            return run_mutating(op, args, kwargs, needs)
        inplace, plain_args, plain_kwargs = rule.split_inplace(args, kwargs)
        if inplace:
            if needs:
                return apply_inplace(op, args[0], plain_args[1:], plain_kwargs, op.name)
            out = forward_untracked(op, args, kwargs)
            bump_version(args[0])
            return out
    if not needs:
        out = forward_untracked(op, args, kwargs)
        _mark_untracked(out, args, kwargs, blocked)
        return out
    if type(rule) is NonDifferentiable:
        out = forward_untracked(op, args, kwargs)
        _mark_untracked(out, args, kwargs, op.name)
        return out
    extra = None
    if rule is not None and rule.forward is not None:
        previous = _GRAD.value
        _GRAD.value = False
        try:
            out, extra = rule.forward(op, args, kwargs)
        finally:
            _GRAD.value = previous
    else:
        out = forward_untracked(op, args, kwargs)
    for a in args:
        if type(a) in (list, tuple):
            out = _fresh_outputs(out, found)
            break
    make_node(op, rule, args, kwargs, out, extra, found)
    return out


def _fresh_outputs(out, found):
    """An op that hands back one of its input tensors itself (``getitem`` picking from a
    list: only tensors inside containers reach an impl as tensors) gets a new tensor on the
    same data: the output's history must not overwrite the input's."""
    inputs = {id(t) for _, t in found}

    def fresh(o):
        return Tensor._make(o._data, o.device) if id(o) in inputs else o

    if isinstance(out, Tensor):
        return fresh(out)
    if isinstance(out, (tuple, list)) and any(id(o) in inputs for o in out):
        items = [fresh(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
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
