"""`AutogradMeta`: what a tensor that takes part in autograd carries in ``Tensor._grad``.

Tensors outside autograd keep ``_grad = None``, so eager dispatch tells them
apart with one attribute test. A meta exists for a tensor that requires grad
(a leaf, or the output of a recorded op), for a tensor some recorded op saved
for its backward (its version counter guards that value against in-place
writes), and for results of non-differentiable ops on such tensors (so asking
for their gradient names the op that stopped it).
"""


class AutogradMeta:
    """Autograd state of one tensor.

    Attributes:
        requires_grad: whether gradients flow to this tensor.
        grad: the accumulated gradient (a Tensor) of a leaf, or of a non-leaf
            that called ``retain_grad()``.
        grad_fn: the `Node` that produced this tensor, None for a leaf.
        output_nr: which output of ``grad_fn`` this tensor is.
        version: a one-element list counting in-place writes, shared by views of
            the same storage (PyTorch's version counter).
        retains_grad: a non-leaf keeps its gradient in ``grad``.
        hooks: functions called with a leaf's gradient before it accumulates.
        post_hooks: functions of no argument called after a leaf's gradient
            accumulated into ``grad`` (``register_post_accumulate_grad_hook``).
        is_view: this tensor shares storage with a tensor it was computed from.
        blocked_by: the name of the non-differentiable op this value came through.
    """

    __slots__ = ("requires_grad", "grad", "grad_fn", "output_nr", "version", "retains_grad", "hooks", "post_hooks", "is_view",
                 "blocked_by", "__weakref__")

    def __init__(self, requires_grad=False, grad_fn=None, output_nr=0, version=None, is_view=False,
                 blocked_by=None):
        self.requires_grad = requires_grad
        self.grad = None
        self.grad_fn = grad_fn
        self.output_nr = output_nr
        self.version = [0] if version is None else version
        self.retains_grad = False
        self.hooks = None
        self.post_hooks = None
        self.is_view = is_view
        self.blocked_by = blocked_by


def meta_of(tensor):
    """The tensor's meta, created (not requiring grad) when it has none."""
    meta = tensor._grad
    if meta is None:
        meta = tensor._grad = AutogradMeta()
    return meta


# Every in-place write into any tensor's storage, counted: what caches values computed from tensors
# (compiled modules' folded constants, packed conv weights) learns with one integer test that nothing was written.
WRITES = [0]


def write_count(tensor):
    """The count of in-place writes into ``tensor``, or None when it keeps none (no autograd state)."""
    meta = tensor._grad
    return None if meta is None else meta.version[0]


def bump_version(tensor):
    """Count an in-place write into ``tensor``'s storage."""
    WRITES[0] += 1
    meta = tensor._grad
    if meta is not None:
        meta.version[0] += 1
