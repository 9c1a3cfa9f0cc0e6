"""The autograd side of `Tensor`'s methods: ``requires_grad``, ``grad``, ``detach``,
``retain_grad``, ``register_hook``. Tensor keeps one-line delegations to these,
so its file holds no autograd logic."""
import weakref

from fxkit.errors import AutogradError, DTypeError, ShapeError
from fxkit.runtime.autograd.autograd_meta import AutogradMeta
from fxkit.runtime.autograd.engine import retain
from fxkit.runtime.tensor import Tensor


def set_requires_grad(tensor, requires_grad):
    meta = tensor._grad
    if meta is not None and meta.grad_fn is not None:
        if requires_grad:
            return
        raise AutogradError("requires_grad: you can only change the requires_grad flag of leaf tensors; this one "
                            f"was computed by {meta.grad_fn.op.name}. Use y = x.detach() for a copy outside the "
                            f"graph")
    if requires_grad and not tensor.dtype.is_floating_point:
        raise DTypeError(f"requires_grad: only tensors of floating point dtype can require gradients, got "
                         f"{tensor.dtype.name}; cast with .float() first")
    if meta is None:
        if not requires_grad:
            return
        meta = tensor._grad = AutogradMeta()
    meta.requires_grad = bool(requires_grad)


def set_grad(tensor, value):
    if value is not None:
        if not isinstance(value, Tensor):
            raise DTypeError(f"grad: assigned value must be a Tensor or None, got {type(value).__name__}")
        if value.shape != tensor.shape:
            raise ShapeError(f"grad: assigned grad has shape {list(value.shape)}, but the tensor has shape "
                             f"{list(tensor.shape)}")
    meta = tensor._grad
    if meta is None:
        if value is None:
            return
        meta = tensor._grad = AutogradMeta()
    meta.grad = value


def zero_grads(params, set_to_none):
    """Reset the gradients of ``params``: drop them (``set_to_none``) or fill them with zeros.

    ``Module.zero_grad`` and ``Optimizer.zero_grad`` both reset this way.
    """
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        if set_to_none:
            param.grad = None
        else:
            grad._data.fill(0)


def detach(tensor):
    out = Tensor._make(tensor._data, tensor.device)
    meta = tensor._grad
    if meta is not None:
        # NOTE: the copy shares the storage, so it shares the version counter too (in-place writes
        # through it are seen by backward passes that saved this tensor).
        out._grad = AutogradMeta(version=meta.version, is_view=meta.is_view)
    return out


def detach_(tensor):
    meta = tensor._grad
    if meta is not None:
        meta.requires_grad = False
        meta.grad_fn = None
        meta.blocked_by = None
    return tensor


def retain_grad(tensor):
    meta = tensor._grad
    if meta is None or not meta.requires_grad:
        raise AutogradError("retain_grad: can't retain the gradient of a tensor that does not require grad")
    if meta.grad_fn is not None:
        retain(meta)


class RemovableHandle:
    """What `register_hook` returns: ``remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks, hook):
        self._hooks = hooks
        self._hook = hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def register_hook(tensor, hook):
    meta = tensor._grad
    if meta is None or not meta.requires_grad:
        raise AutogradError("register_hook: can't register a hook on a tensor that does not require grad")
    node = meta.grad_fn
    if node is None:
        if meta.hooks is None:
            meta.hooks = []
        hooks = meta.hooks
    else:
        if node.hooks is None:
            node.hooks = {}
        hooks = node.hooks.setdefault(meta.output_nr, [])
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def register_post_accumulate_grad_hook(tensor, hook):
    meta = tensor._grad
    if meta is None or not meta.requires_grad:
        raise AutogradError("register_post_accumulate_grad_hook: can't register a hook on a tensor that does not "
                            "require grad")
    if meta.grad_fn is not None:
        raise AutogradError("register_post_accumulate_grad_hook: only leaf tensors accumulate gradients; this one "
                            f"was computed by {meta.grad_fn.op.name} (use register_hook for non-leaf tensors)")
    if meta.post_hooks is None:
        meta.post_hooks = []
    # NOTE: a weak reference: the meta the hook lives in belongs to the tensor (no cycle keeps it alive).
    ref = weakref.ref(tensor)

    def call():
        t = ref()
        if t is not None:
            hook(t)

    meta.post_hooks.append(call)
    return RemovableHandle(meta.post_hooks, call)
