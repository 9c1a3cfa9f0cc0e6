"""In-place operations under autograd: ``x += y``, ``x.relu_()``, ``x[idx] = v``.

An in-place op on a tensor that takes part in autograd is recorded as its
out-of-place op applied to the tensor's previous value, whose result is then
written into the tensor's storage; the tensor's history moves to the new node
(PyTorch's "rebase"). Its version counter counts the write, so a backward that
saved the old value and would now read the new one fails with a clear error
instead of a wrong gradient. When the op's own backward needs the previous
value (``x.mul_(y)``), that value is copied first, as PyTorch keeps
``original_self``.

Refused, with the fix in the message: writing into a leaf that requires grad
(outside ``no_grad``), and writing into a view of another tensor when
autograd would have to record the write into that other tensor's history.

Version counters live in the autograd state of tensors that take part in
autograd (and are shared with the views recorded from them): a write into a
tensor autograd never saw, or through ``.data``, is not counted, as with
PyTorch's ``.data``.
"""
import sys

from fxkit.errors import AutogradError
from fxkit.runtime.autograd import grad_mode
from fxkit.runtime.autograd.autograd_meta import WRITES, AutogradMeta, bump_version
from fxkit.runtime.autograd.function import GradRule, forward_untracked, iter_tensors, make_node
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.tensor_methods import assign_inplace

_GRAD = grad_mode.ENABLED


def apply_inplace(op, target, args, kwargs, name):
    """``target.<name>(*args, **kwargs)``: ``op(target, *args, **kwargs)`` written into ``target``.

    Called by the in-place tensor methods when ``target`` or an argument carries
    autograd state; returns ``target``.
    """
    meta = target._grad
    target_needs = meta is not None and meta.requires_grad
    value_needs = any(t._grad is not None and t._grad.requires_grad for _, t in iter_tensors(args, kwargs))
    if not _GRAD.value or not (target_needs or value_needs):
        assign_inplace(target, op(target, *args, **kwargs), name)
        bump_version(target)
        return target
    check_writable(target, name, target_needs, value_needs)
    rule = op.grad_rule
    keep = type(rule) is GradRule and rule.name_of((0,)) in rule.saves
    if not keep and type(rule) is GradRule and rule.inplace_kw and rule.forward is None:
        return _write_through(op, rule, target, args, kwargs, name)
    previous = Tensor._make(target._data.copy() if keep else target._data, target.device)
    if meta is not None:
        previous._grad = AutogradMeta(meta.requires_grad, meta.grad_fn, meta.output_nr) if keep else meta
    result = op(previous, *args, **kwargs)
    assign_inplace(target, result, name)
    version = meta.version if meta is not None else [0]
    version[0] += 1
    WRITES[0] += 1
    done = result._grad
    if done is not None and done.requires_grad:
        target._grad = AutogradMeta(True, done.grad_fn, done.output_nr, version)
    else:
        target._grad = AutogradMeta(version=version, blocked_by=done.blocked_by if done is not None else None)
    return target


def _write_through(op, rule, target, args, kwargs, name):
    """``op(target, ..., inplace=True)`` for an op whose gradient does not read its input (``relu_``): the op
    writes straight into ``target``'s memory and the call is recorded on the value before the write. One pass
    where computing out of place and copying made two (ResNet-18's seventeen ReLUs); the result a rule reads
    (``ctx.out``) is ``target`` itself, under its version counter, so a later write into it is caught."""
    meta = target._grad
    previous = Tensor._make(target._data, target.device)
    previous._grad = meta
    call_args = (previous,) + tuple(args)
    out = forward_untracked(op, call_args, {**kwargs, "inplace": True})
    if out._data is not target._data:  # an impl that could not write in place (a dtype it computes apart)
        assign_inplace(target, out, name)
    version = meta.version if meta is not None else [0]
    version[0] += 1
    WRITES[0] += 1
    make_node(op, rule, call_args, {**kwargs, "inplace": False}, target)
    written = target._grad
    written.version, written.is_view = version, False  # check_writable refused views
    return target


def run_mutating(op, args, kwargs, record):
    """An op that writes into its first argument (``setitem``): run it, count the write,
    and when ``record``, make the written tensor's history this call."""
    target = args[0]
    meta = target._grad
    if not record or target._data.dtype.kind != "f":
        out = forward_untracked(op, args, kwargs)
        bump_version(target)
        return out
    target_needs = meta is not None and meta.requires_grad
    check_writable(target, op.name, target_needs, not target_needs)
    previous = Tensor._make(target._data, target.device)
    previous._grad = meta
    out = forward_untracked(op, args, kwargs)
    version = meta.version if meta is not None else [0]
    version[0] += 1
    WRITES[0] += 1
    make_node(op, op.grad_rule, (previous,) + tuple(args[1:]), kwargs, target)
    written = target._grad
    written.version, written.is_view = version, False  # check_writable refused views
    return out


def check_writable(target, name, target_needs, value_needs):
    """Refuse in-place writes autograd cannot record (see the module docstring)."""
    meta = target._grad
    if target_needs and meta.grad_fn is None:
        raise AutogradError(
            f"{name}: a leaf tensor that requires grad is used in an in-place operation; its gradient would "
            f"be computed for a value that no longer exists. Update parameters inside `with fxkit.no_grad():`, "
            f"or compute out of place (`y = x + ...` instead of `x += ...`)")
    if meta is not None and meta.is_view or value_needs and _untracked_view(target):
        raise AutogradError(
            f"{name}: in-place operation on a view of another tensor while autograd records it; fxkit does not "
            f"carry the write into the viewed tensor's history. Compute out of place (`y = v + ...`), or "
            f"write into the base tensor by indexing (`base[index] = value`)")


def _untracked_view(target):
    """Whether ``target``'s array views a buffer something else still holds (another tensor,
    or another view): writing into it would change a tensor autograd does not watch."""
    base = target._data.base
    # NOTE: references to the buffer here: the view's ``base``, the local name and the call's argument.
    return base is not None and sys.getrefcount(base) > 3
