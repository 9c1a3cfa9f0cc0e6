"""The backward pass: run the recorded graph's rules from the outputs back to the leaves.

Nodes run in a topological order of the graph reachable from the outputs, so
a node runs once, after every gradient of its outputs has arrived (summed).
Leaves accumulate into ``.grad`` (`backward`) or hand their gradient back
(`grad`); a leaf reached along several edges gets their sum in one
accumulation (PyTorch's AccumulateGrad: a gradient nothing else refers to
becomes ``.grad`` without a copy), after which its post-accumulate
hooks run: data-parallel training starts reducing a gradient the moment it
is final. Callbacks queued during a backward (`queue_callback`) run once it
has finished, before ``backward()`` returns; those given to `call_between_nodes`
run after each node meanwhile (driving communication that needs the host's
attention, as MPI's does). Without ``retain_graph`` each node drops its saved values once run,
so memory held for backward is freed as the pass goes, and a second backward
through the same graph is an error, as in PyTorch.
"""
import sys
import threading
import weakref

from fxkit.errors import AutogradError
from fxkit.runtime.autograd import grad_mode
from fxkit.runtime.autograd.function import NonDifferentiable, run_rule
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_GRAD = grad_mode.ENABLED
_ACCUMULATE = threading.Lock()
"""Serialises adding into ``.grad``: threads running backward into one shared parameter (PyTorch's
AccumulateGrad locks the same way) would otherwise lose updates between the check and the add."""


class _Running:
    """The callbacks of one backward in progress: ``at_end`` run once it finished, ``between_nodes`` after
    each node."""

    __slots__ = ("at_end", "between_nodes")

    def __init__(self):
        self.at_end = []
        self.between_nodes = []


# One `_Running` per backward running on this thread (a hook may start another backward).
_CALLBACKS = threading.local()


def queue_callback(callback):
    """Run ``callback()`` when the backward pass now running ends, before ``backward()`` returns.

    Called from a hook: `DistributedDataParallel` queues the wait for its
    gradient all-reduces this way, as PyTorch's DDP does through its engine's
    ``queue_callback``. Callbacks run in the order queued, only if the
    backward succeeded.

    Raises:
        AutogradError: no backward pass is running on this thread.
    """
    _running("queue_callback").at_end.append(callback)


def call_between_nodes(callback):
    """Call ``callback()`` after every node of the backward now running, from now until it ends.

    For work that moves on only while the host calls into it: MPI progresses a
    non-blocking all-reduce only inside MPI calls of this process, so
    `DistributedDataParallel` tests its bucket all-reduces between nodes, and
    they advance while the backward computes instead of waiting for its end.
    The callback runs once per node, so it must be cheap (microseconds).

    Raises:
        AutogradError: no backward pass is running on this thread.
    """
    _running("call_between_nodes").between_nodes.append(callback)


def _running(who):
    stack = getattr(_CALLBACKS, "stack", None)
    if not stack:
        raise AutogradError(f"{who}: no backward pass is running; call it from a gradient hook")
    return stack[-1]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves they depend on.

    Args:
        tensors: a tensor or a sequence of them (each requires grad).
        grad_tensors: the gradient of each (None: 1 for a one-element tensor).
        retain_graph: keep the saved values for another backward through this graph.
        create_graph: higher-order gradients; not supported (must be False).
        inputs: if given, only these tensors accumulate gradients.

    Example:
        >>> loss = model(x).sum()
        >>> fxkit.autograd.backward(loss)   # same as loss.backward()
    """
    _check_first_order(create_graph)
    roots = _roots(tensors, grad_tensors)
    stack = getattr(_CALLBACKS, "stack", None)
    if stack is None:
        stack = _CALLBACKS.stack = []
    running = _Running()
    stack.append(running)
    try:
        if inputs is None:
            _run(roots, bool(retain_graph), None, running.between_nodes)
        else:
            inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
            for t, g in zip(inputs, _captured(roots, inputs, bool(retain_graph))):
                if g is not None:
                    _accumulate(t._grad, g)
                    _post_hooks(t._grad)
    finally:
        stack.pop()
    for callback in running.at_end:
        callback()


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of ``outputs`` with respect to ``inputs``, returned instead of accumulated.

    Args:
        outputs: a tensor or a sequence of them.
        inputs: a tensor or a sequence of tensors that require grad (leaves or not).
        grad_outputs: the gradient of each output (None: 1 for one-element outputs).
        retain_graph: keep the graph's saved values for another backward.
        create_graph: higher-order gradients; not supported (must be False).
        allow_unused: give None for an input the outputs do not depend on
            (otherwise that is an error).

    Returns:
        A tuple with one gradient per input.

    Example:
        >>> (dx,) = fxkit.autograd.grad((x * x).sum(), x)   # 2 * x
    """
    _check_first_order(create_graph)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise AutogradError(f"grad: input {i} does not require grad; only tensors that require grad can be "
                                f"differentiated with respect to")
    grads = _captured(_roots(outputs, grad_outputs), inputs, bool(retain_graph))
    if not allow_unused and any(g is None for g in grads):
        i = next(i for i, g in enumerate(grads) if g is None)
        raise AutogradError(f"grad: input {i} was not used to compute the outputs; pass allow_unused=True "
                            f"to get None for it")
    return tuple(grads)


def _check_first_order(create_graph):
    if create_graph:
        raise AutogradError("create_graph=True: higher-order gradients are not supported by fxkit's autograd")


def _roots(tensors, grads):
    """``[(tensor, gradient)]`` for the outputs a backward starts from, checked."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if grads is None or isinstance(grads, Tensor):
        grads = [grads] * len(tensors) if grads is None else [grads]
    grads = list(grads)
    if len(grads) != len(tensors):
        raise AutogradError(f"backward: got {len(tensors)} tensors but {len(grads)} gradients")
    roots = []
    for i, (t, g) in enumerate(zip(tensors, grads)):
        if not t.requires_grad:
            raise _no_grad_error(t, i)
        if g is None:
            if t._data.size != 1:
                raise AutogradError(f"backward: grad can be implicitly created only for scalar outputs; element {i} "
                                    f"has shape {list(t.shape)}; pass gradient= (a tensor of that shape)")
            g = Tensor._make(t.device.xp.ones(t.shape, t._data.dtype), t.device)
        elif not isinstance(g, Tensor):
            raise AutogradError(f"backward: gradient {i} must be a Tensor, got {type(g).__name__}")
        elif g.shape != t.shape:
            raise AutogradError(f"backward: mismatch in shape: gradient {i} has shape {list(g.shape)} but the "
                                f"tensor has shape {list(t.shape)}")
        elif g.dtype is not t.dtype:
            g = g.to(t.dtype)
        roots.append((t, g))
    return roots


def _no_grad_error(t, i):
    meta = t._grad
    if meta is not None and meta.blocked_by is not None:
        rule = get_op(meta.blocked_by).grad_rule
        why = f" ({rule.reason})" if isinstance(rule, NonDifferentiable) else ""
        return AutogradError(f"element {i} of tensors does not require grad: it was computed through "
                             f"{meta.blocked_by}, which is not differentiable{why}; no gradient flows back "
                             f"through {meta.blocked_by}")
    return AutogradError(f"element {i} of tensors does not require grad and has no grad_fn; create the leaves "
                         f"with requires_grad=True (or call .requires_grad_()) and compute the output from them "
                         f"outside fxkit.no_grad()")


def _captured(roots, inputs, retain_graph):
    """Run backward handing back the gradients of ``inputs`` instead of accumulating."""
    capture = {}
    for t in inputs:
        meta = t._grad
        key = id(meta) if meta.grad_fn is None else (id(meta.grad_fn), meta.output_nr)
        capture[key] = None
    _run(roots, retain_graph, capture)
    out = []
    for t in inputs:
        meta = t._grad
        out.append(capture[id(meta) if meta.grad_fn is None else (id(meta.grad_fn), meta.output_nr)])
    return out


def _run(roots, retain_graph, capture, between_nodes=()):
    buffers = {}
    for t, g in roots:
        meta = t._grad
        if meta.grad_fn is None:
            _deliver(meta, g, capture)
        else:
            _add(buffers, meta.grad_fn, meta.output_nr, g)
    order = _topological(list(buffers))
    useful = _useful(order, capture) if capture is not None else None
    leaves = _leaf_edges(order) if capture is None else None
    for node in order:
        grads = buffers.pop(node, None)
        if grads is None or (useful is not None and node not in useful):
            if leaves is not None:
                for _, edge, _ in node.inputs:
                    if type(edge) is not tuple:
                        _arrive(leaves, edge, None)
            continue
        results = run_node(node, grads, retain_graph, capture)
        for i, (_, edge, _) in enumerate(node.inputs):
            g = results[i]
            results[i] = None
            if type(edge) is tuple:
                if g is not None:
                    _add(buffers, edge[0], edge[1], g)
            elif leaves is not None:
                # NOTE: two references (``g`` and getrefcount's argument): the rule made this gradient and
                # nothing else holds it (an incoming gradient handed on stays in ``grads``; a hook's keeps one).
                owned = g is not None and sys.getrefcount(g) == 2
                _arrive(leaves, edge, g, owned)
            elif g is not None:
                _deliver(edge, g, capture)
        for callback in between_nodes:
            callback()


def _leaf_edges(order):
    """``{id(meta): [edges still to arrive, gradient so far, whether only the engine holds it]}``
    for the leaves the nodes feed."""
    leaves = {}
    for node in order:
        for _, edge, _ in node.inputs:
            if type(edge) is not tuple:
                slot = leaves.get(id(edge))
                if slot is None:
                    leaves[id(edge)] = [1, None, False]
                else:
                    slot[0] += 1
    return leaves


def _arrive(leaves, meta, g, owned):
    """One edge into leaf ``meta`` is done (``g`` may be None; ``owned``: only the engine holds it);
    deliver the sum once all are."""
    slot = leaves[id(meta)]
    if g is not None:
        if slot[1] is None:
            slot[1], slot[2] = g, owned
        else:
            slot[1], slot[2] = slot[1] + g, True
    slot[0] -= 1
    if not slot[0] and slot[1] is not None:
        g, slot[1] = slot[1], None
        _deliver(meta, g, None, slot[2])


def _topological(starts):
    """The nodes reachable from ``starts``, each after every node that feeds it a gradient."""
    deps = {}
    stack = list(starts)
    seen = set(stack)
    while stack:
        for _, edge, _ in stack.pop().inputs:
            if type(edge) is tuple:
                child = edge[0]
                deps[child] = deps.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    ready = [n for n in starts if n not in deps]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for _, edge, _ in node.inputs:
            if type(edge) is tuple:
                child = edge[0]
                deps[child] -= 1
                if not deps[child]:
                    ready.append(child)
    return order


def _useful(order, capture):
    """The nodes whose gradients reach an input of `grad` (the rest need not run)."""
    useful = set()
    for node in reversed(order):
        for i in range(len(node.outs)):
            if (id(node), i) in capture:
                useful.add(node)
        for _, edge, _ in node.inputs:
            if (edge[0] in useful) if type(edge) is tuple else (id(edge) in capture):
                useful.add(node)
    return useful


def run_node(node, grads, retain_graph, capture=None):
    """Run one node's rule on the gradients of its outputs; one gradient (or None) per input."""
    rule = node.rule
    if rule is None:
        raise AutogradError(f"{node.op.name}: the derivative of {node.op.name} is not implemented (it has no grad "
                            f"rule); detach its inputs, or register one with fxkit.runtime.autograd.defgrad")
    if node.freed:
        raise AutogradError(f"{node.name()}: trying to backward through the graph a second time (its saved values "
                            f"were freed after the first backward); pass retain_graph=True to the first backward")
    for counter, version, label in node.saved:
        if counter[0] != version:
            raise AutogradError(
                f"{node.op.name}: one of the tensors needed for gradient computation has been modified by an "
                f"inplace operation: the {label} of {node.op.name} is at version {counter[0]}; expected version "
                f"{version}. Compute out of place (`y = x * 2`, not `x *= 2`) or work on a copy")
    for i, spec in enumerate(node.outs):
        g = grads[i]
        if g is None:
            if spec is not None:
                shape, dtype, device = spec
                grads[i] = Tensor._make(device.xp.zeros(shape, dtype), device)
            continue
        if node.hooks is not None:
            for hook in node.hooks.get(i, ()):
                changed = hook(g)
                g = grads[i] = g if changed is None else changed
        if node.retained is not None and i in node.retained:
            meta = node.retained[i]()
            if meta is not None:
                _accumulate(meta, g)
        if capture is not None and (id(node), i) in capture:
            previous = capture[(id(node), i)]
            capture[(id(node), i)] = g if previous is None else previous + g
    out = None
    if node.out_data is not None:
        outs = tuple(None if kept is None else Tensor._make(*kept) for kept in node.out_data)
        out = outs[0] if node.single else outs
    wanted = [(path, stand_in) for path, _, stand_in in node.inputs]
    previous = _GRAD.value
    _GRAD.value = False
    try:
        results = run_rule(rule, grads[0] if node.single else tuple(grads), node.args, node.kwargs, wanted, out,
                           node.extra)
        results = [conform(g, stand_in, node.op.name) for g, (_, stand_in) in zip(results, wanted)]
    finally:
        _GRAD.value = previous
    if not retain_graph:
        node.release()
    return results


def conform(grad, like, op_name):
    """``grad`` summed to the shape of ``like`` (undoing broadcasting) and cast to its dtype.

    Args:
        grad: a gradient from a rule, or None.
        like: the input (a Tensor or `TensorMeta`) it is the gradient of.
        op_name: the op, for the error when the shapes cannot match.
    """
    if grad is None:
        return None
    if not isinstance(grad, Tensor):
        raise AutogradError(f"{op_name}: its grad rule returned {type(grad).__name__}, not a Tensor")
    return shaped_like(grad, like, op_name)


def shaped_like(grad, like, op_name):
    """A gradient (Tensor or recorded graph value) summed to ``like``'s shape and cast to its dtype."""
    shape = tuple(like.shape)
    if grad.shape != shape:
        grad = sum_to_shape(grad, shape, op_name)
    if grad.dtype is not like.dtype:
        grad = grad.to(like.dtype)
    return grad


def sum_to_shape(grad, shape, op_name="sum_to_shape"):
    """The sum of ``grad`` over the dims broadcasting added to ``shape``."""
    lead = grad.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    if lead < 0 or any(n != m for n, m in zip(shape, grad.shape[lead:]) if n != 1):
        raise AutogradError(f"{op_name}: its grad rule returned a gradient of shape {list(grad.shape)} for an input "
                            f"of shape {list(shape)}")
    if dims:
        grad = grad.sum(dims, keepdim=True)
    return grad.reshape(shape) if grad.shape != shape else grad


def _add(buffers, node, nr, g):
    slot = buffers.get(node)
    if slot is None:
        slot = buffers[node] = [None] * len(node.outs)
    previous = slot[nr]
    slot[nr] = g if previous is None else previous + g


def _deliver(meta, g, capture, owned=False):
    if capture is not None:
        key = id(meta)
        if key in capture:
            previous = capture[key]
            capture[key] = g if previous is None else previous + g
        return
    if meta.hooks:
        owned = False  # a hook may keep the gradient it was given
        for hook in meta.hooks:
            changed = hook(g)
            g = g if changed is None else changed
    _accumulate(meta, g, owned)
    _post_hooks(meta)


def _post_hooks(meta):
    if meta.post_hooks:
        for hook in tuple(meta.post_hooks):
            hook()


def _accumulate(meta, g, owned=False):
    """Add ``g`` into ``meta.grad``, in place (as PyTorch's AccumulateGrad). The first time,
    ``.grad`` takes ``g``'s array when ``owned`` (no one but the engine holds the Tensor ``g``)
    and no other array shares its memory; otherwise a copy, since a rule's gradient may alias
    another gradient, a saved value or the caller's tensor, and ``.grad`` is written in place
    later (the next accumulation, ``zero_grad(set_to_none=False)``)."""
    with _ACCUMULATE:
        if meta.grad is None:
            data = g._data if owned and _sole_owner(g) else g._data.copy()
            meta.grad = Tensor._make(data, g.device)
        else:
            meta.grad._data += g._data


def _sole_owner(g):
    """Whether ``g`` alone refers to its array and the memory under it, and the array is one
    ``.grad`` may keep: contiguous and writeable (a broadcast view is read-only)."""
    data = g._data
    if not data.flags.c_contiguous or not getattr(data.flags, "writeable", True):
        return False
    # NOTE: references: ``g._data``, ``data`` here and getrefcount's argument (a numpy flags object
    # holds one too, so none is kept here); a view's base counts the view's reference and this
    # function's, so any other view or array over the memory shows up in one of the two counts.
    if sys.getrefcount(data) != 3:
        return False
    base = data.base
    return base is None or (type(base) is type(data) and base.base is None and sys.getrefcount(base) == 3)


def retain(meta):
    """Keep the gradient of the non-leaf tensor of ``meta`` in its ``grad`` (``retain_grad``)."""
    node = meta.grad_fn
    if node.retained is None:
        node.retained = {}
    node.retained[meta.output_nr] = weakref.ref(meta)
    meta.retains_grad = True
