"""Derivative rules, kept in the op registry, and `Node`, one recorded op call.

Each op's rule sits beside its forward as ``op.grad_rule``: a `GradRule`, or
`NonDifferentiable` for ops with no gradient (comparisons, argmax, integer
results, factories). The ``rules_*.py`` modules fill the table when
``fxkit.runtime`` is imported.

A rule is ``backward(ctx, grad, *args, **kwargs)``, called with the forward
call's own arguments, so it is written with the op's parameter names:

    @defgrad("mul", saves=("a", "b"))
    def _(ctx, g, a, b):
        return g * b, g * a

``grad`` is the gradient of the output (a tuple of them for ops with several
outputs; zeros where no gradient arrived, None for integer outputs). Tensor
arguments the rule ``saves`` arrive as the Tensors of the forward call; the
others as `TensorMeta` (shape, dtype, device only), so a recorded call keeps
alive only what its backward reads. ``ctx.out`` is the forward result when
``out=True``, ``ctx.extra`` what a ``forward`` override kept (max_pool2d's
indices, dropout's mask), and ``ctx.needs(x)`` tells whether argument ``x``
wants a gradient. The rule returns one gradient per parameter of the op, in
the impl's parameter order (a sequence for a list or ``*args`` parameter,
None where there is none); a gradient may have the broadcast shape of the
output: `conform` sums it to its input's shape and casts it to its dtype.
Rules compute with registry ops, so a graph-level transform can run them on
graph values too (`run_rule`, then `engine.conform`); the two forward
overrides are max_pool2d (its indices: call it with ``return_indices=True``)
and dropout (its mask).
"""
import inspect

from fxkit.errors import AutogradError, FxkitError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd import grad_mode
from fxkit.runtime.autograd.autograd_meta import AutogradMeta, meta_of
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_GRAD = grad_mode.ENABLED


class GradRule:
    """The derivative of one op (``op.grad_rule``).

    Attributes:
        op: the op.
        backward: ``backward(ctx, grad, *args, **kwargs)`` (see the module docstring).
        saves: parameter names whose tensor values ``backward`` reads.
        out: ``backward`` reads the forward result (``ctx.out``).
        nondiff: tensor parameters with no gradient (batch_norm's running
            statistics); a tensor there that requires grad is an error.
        forward: optional ``forward(op, args, kwargs) -> (result, extra)`` run
            instead of the op when recording, to keep what backward needs.
        mutates: the op writes into its first argument (``setitem``).
        inplace_kw: the op writes into its first argument when its ``inplace``
            argument is True (``relu(x, inplace=True)``).
    """

    __slots__ = ("op", "backward", "saves", "out", "nondiff", "forward", "mutates", "inplace_kw", "params",
                 "varargs_at")

    def __init__(self, op, backward, saves=(), out=False, nondiff=(), forward=None, mutates=False,
                 inplace_kw=False):
        params = list(op.signature.parameters.values())
        self.params = tuple(p.name for p in params)
        self.varargs_at = next((i for i, p in enumerate(params) if p.kind is p.VAR_POSITIONAL), None)
        unknown = sorted((set(saves) | set(nondiff)) - set(self.params))
        if unknown:
            raise FxkitError(f"grad rule of {op.name}: {unknown} are not parameters of {op.name} {self.params}")
        _check_signature(op, backward, params)
        self.op = op
        self.backward = backward
        self.saves = frozenset(saves)
        self.out = out
        self.nondiff = frozenset(nondiff)
        self.forward = forward
        self.mutates = mutates
        self.inplace_kw = inplace_kw
        if inplace_kw and "inplace" not in self.params:
            raise FxkitError(f"grad rule of {op.name}: inplace_kw=True, but {op.name} has no inplace parameter")

    def split_inplace(self, args, kwargs):
        """``(True, args, kwargs)`` without the request when a call asks to write into its
        first argument (``inplace=True``, by keyword or position), else ``(False, args, kwargs)``."""
        if not self.inplace_kw:
            return False, args, kwargs
        at = self.params.index("inplace")
        if len(args) > at:
            return args[at] is True, args[:at], {**kwargs, "inplace": False}
        return kwargs.get("inplace") is True, args, {**kwargs, "inplace": False}

    def name_of(self, path):
        """The parameter an argument at ``path`` (see `iter_tensors`) binds to."""
        head = path[0]
        if type(head) is str:
            return head
        if self.varargs_at is not None and head >= self.varargs_at:
            return self.params[self.varargs_at]
        return self.params[head] if head < len(self.params) else None

    def slot_of(self, path):
        """Where the gradient of the argument at ``path`` sits in ``backward``'s result."""
        head = path[0]
        if type(head) is str:
            return (self.params.index(head),) + path[1:]
        if self.varargs_at is not None and head >= self.varargs_at:
            return (self.varargs_at, head - self.varargs_at) + path[1:]
        return path

    def __repr__(self):
        return f"<grad rule of {self.op.name}>"


def _check_signature(op, backward, params):
    """A rule is called with the forward call's arguments: it must take the impl's parameter
    names (or catch them with ``*args``/``**kwargs``)."""
    own = list(inspect.signature(backward).parameters.values())[2:]  # without ctx, grad
    names = {p.name for p in own}
    has_args = any(p.kind is p.VAR_POSITIONAL for p in own)
    has_kwargs = any(p.kind is p.VAR_KEYWORD for p in own)
    for p in params:
        if p.kind is p.VAR_POSITIONAL and not has_args:
            missing = "*" + p.name
        elif p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names and not (
                has_kwargs and (has_args or p.kind is p.KEYWORD_ONLY)):
            missing = p.name
        else:
            continue
        raise FxkitError(f"grad rule of {op.name}: it must take the parameter {missing} of {op.name}'s impl "
                         f"(the rule is called with the forward call's arguments)")


class NonDifferentiable:
    """The mark of an op with no gradient; ``reason`` ends the error asking for one."""

    __slots__ = ("op", "reason")

    def __init__(self, op, reason):
        self.op = op
        self.reason = reason

    def __repr__(self):
        return f"<{self.op.name}: not differentiable ({self.reason})>"


def defgrad(name, *, saves=(), out=False, nondiff=(), forward=None, mutates=False, inplace_kw=False):
    """Decorator: register ``backward`` as the derivative rule of the op called ``name``."""

    def register(backward):
        op = get_op(name)
        op.grad_rule = GradRule(op, backward, saves, out, nondiff, forward, mutates, inplace_kw)
        return backward

    return register


def nondifferentiable(reason, *names):
    """Mark the ops called ``names`` as having no gradient, for ``reason``."""
    for name in names:
        op = get_op(name)
        op.grad_rule = NonDifferentiable(op, reason)


class Context:
    """What a rule's backward sees besides the arguments: ``out``, ``extra``, ``needs(x)``."""

    __slots__ = ("out", "extra", "_needs")

    def __init__(self, out, extra, needs):
        self.out = out
        self.extra = extra
        self._needs = needs

    def needs(self, x):
        """Whether the argument ``x`` (as the rule received it) wants a gradient."""
        return id(x) in self._needs


def run_rule(rule, grad, args, kwargs, wanted, out=None, extra=None):
    """Run ``rule`` on one call outside the engine (a graph-level transform calls it with
    graph values): ``wanted`` lists ``(path, argument)`` of the inputs that want a gradient
    (paths as `iter_tensors` gives them); returns their gradients, in that order, as the
    rule returned them (None where it gave none; `engine.conform` fits them to the inputs)."""
    ctx = Context(out, extra, {id(value) for _, value in wanted})
    result = rule.backward(ctx, grad, *args, **kwargs)
    return [pick(result, rule.slot_of(path)) for path, _ in wanted]


def pick(result, slot):
    """The entry at ``slot`` of a rule's result (None where the result stops short)."""
    value = result if isinstance(result, (tuple, list)) else (result,)
    for i in slot:
        if value is None:
            return None
        if not isinstance(value, (tuple, list)):
            raise AutogradError(f"grad rule returned {type(value).__name__} where a sequence was expected")
        value = value[i] if i < len(value) else None
    return value


class Node:
    """One recorded op call: the ``grad_fn`` of its outputs.

    Attributes:
        op, rule: the op and its `GradRule` (None when the op has no rule).
        args, kwargs: the call's arguments, tensors replaced as the rule receives them.
        inputs: ``(path, edge, stand_in)`` per input that requires grad; ``edge`` is
            ``(node, output_nr)`` or the leaf's `AutogradMeta`.
        saved: ``(version_counter, version, label)`` of every saved value.
        outs: ``(shape, numpy dtype, device)`` per output, None for integer outputs.
        single: the op returned one tensor (its rule gets one gradient, not a tuple).
        out_data: ``(array, device)`` per output (None for non-tensors) when the rule reads ``ctx.out``.
        extra: what the rule's forward override kept.
        freed: the saved values were released after a backward without retain_graph.
        retained, hooks: per output, the metas keeping their gradient and gradient hooks.
    """

    __slots__ = ("op", "rule", "args", "kwargs", "inputs", "saved", "outs", "single", "out_data", "extra", "freed",
                 "retained", "hooks", "__weakref__")

    def __init__(self, op, rule):
        self.op = op
        self.rule = rule
        self.out_data = None
        self.extra = None
        self.freed = False
        self.retained = None
        self.hooks = None

    def name(self):
        return f"{self.op.name}_backward"

    def __repr__(self):
        return f"<{self.name()}>"

    @property
    def next_functions(self):
        """``(node, output_nr)`` per input that requires grad; ``(None, 0)`` for a leaf."""
        return tuple(edge if type(edge) is tuple else (None, 0) for _, edge, _ in self.inputs)

    def release(self):
        """Drop the saved values (the default after backward, like PyTorch's ``retain_graph=False``)."""
        if self.saved or self.out_data is not None or self.extra is not None:
            self.freed = True
            self.args = self.kwargs = self.out_data = self.extra = None
            self.inputs = [(path, edge, s if isinstance(s, TensorMeta) else TensorMeta(s.shape, s.dtype, s.device))
                           for path, edge, s in self.inputs]


def iter_tensors(args, kwargs):
    """``[(path, tensor)]`` for every tensor argument Op dispatch unwraps: ``(i,)`` for
    positional ``i``, ``(i, j)`` for item ``j`` of a list there, ``(name,)`` for a keyword."""
    found = []
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            found.append(((i,), a))
        elif type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
            for j, t in enumerate(a):
                if isinstance(t, Tensor):
                    found.append(((i, j), t))
    if kwargs:
        for k, v in kwargs.items():
            if isinstance(v, Tensor):
                found.append(((k,), v))
    return found


def substitute(args, kwargs, visit, found=None):
    """``args``/``kwargs`` with each tensor argument ``t`` at ``path`` replaced by ``visit(path, t)``
    (``found``: `iter_tensors`'s result when the caller has it)."""
    new_args, new_kwargs = list(args), dict(kwargs)
    for path, t in iter_tensors(args, kwargs) if found is None else found:
        head = path[0]
        if type(head) is str:
            new_kwargs[head] = visit(path, t)
        elif len(path) == 1:
            new_args[head] = visit(path, t)
        else:
            if new_args[head] is args[head]:
                new_args[head] = list(args[head])
            new_args[head][path[1]] = visit(path, t)
    return new_args, new_kwargs


def forward_untracked(op, args, kwargs):
    """Run ``op`` without recording (its internals never record either)."""
    previous = _GRAD.value
    _GRAD.value = False
    try:
        return op(*args, **kwargs)
    finally:
        _GRAD.value = previous


def flat_outputs(out):
    """The tensors an op returned, in order (one for a single tensor)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return list(out)
    return []


def shares_storage(a, b):
    """Whether arrays ``a`` and ``b`` are views of one buffer (numpy and cupy keep ``base``
    pointing at the owner, so views of views compare equal)."""
    if a is b:
        return True
    base_a, base_b = a.base, b.base
    return (base_a is not None and (base_a is b or base_a is base_b)) or (base_b is not None and base_b is a)


def make_node(op, rule, args, kwargs, out, extra=None, found=None):
    """Record the call ``op(*args, **kwargs) -> out`` and make its float outputs require grad
    (``found``: `iter_tensors` of the arguments, when the caller has it)."""
    node = Node(op, rule)
    saves = rule.saves if rule is not None else ()
    nondiff = rule.nondiff if rule is not None else ()
    saved = []
    inputs = []
    metas_in = []
    new_args, new_kwargs = list(args), dict(kwargs)
    for path, t in iter_tensors(args, kwargs) if found is None else found:
        meta = t._grad
        name = rule.name_of(path) if saves or nondiff else None
        if name in saves:
            stand_in = t
            kept = meta_of(t)
            saved.append((kept.version, kept.version[0], f"input '{name}'"))
        else:
            stand_in = TensorMeta(t.shape, _dt._BY_NP[t._data.dtype], t.device)
        if meta is not None:
            metas_in.append((t, meta))
            if meta.requires_grad:
                if name in nondiff:
                    raise AutogradError(f"{op.name}: {name} requires grad, but {op.name} is not differentiable "
                                        f"with respect to {name}; pass {name}.detach()")
                inputs.append((path, meta if meta.grad_fn is None else (meta.grad_fn, meta.output_nr), stand_in))
        head = path[0]
        if type(head) is str:
            new_kwargs[head] = stand_in
        elif len(path) == 1:
            new_args[head] = stand_in
        else:
            if new_args[head] is args[head]:
                new_args[head] = list(args[head])
            new_args[head][path[1]] = stand_in
    node.args, node.kwargs = new_args, new_kwargs
    node.inputs = inputs
    node.single = isinstance(out, Tensor)
    outputs = (out,) if node.single else flat_outputs(out)
    keeps_out = rule is not None and rule.out
    outs = []
    for i, o in enumerate(outputs):
        if isinstance(o, Tensor) and o._data.dtype.kind == "f":
            data = o._data
            outs.append((data.shape, data.dtype, o.device))
            meta = o._grad = AutogradMeta(True, node, i)
            if data.base is not None or _is_input(data, metas_in):  # a view: share versions
                for t, m in metas_in:
                    if shares_storage(data, t._data):
                        meta.version, meta.is_view = m.version, True
                        break
            if keeps_out:
                saved.append((meta.version, meta.version[0], "result"))
        else:
            outs.append(None)
    node.outs = outs
    if keeps_out:
        node.out_data = tuple((o._data, o.device) if isinstance(o, Tensor) else None for o in outputs)
    node.saved = saved
    node.extra = extra
    return node


def _is_input(data, metas_in):
    """Whether the array ``data`` is one of the recorded inputs' own arrays (an op handing its input back)."""
    for t, _ in metas_in:
        if t._data is data:
            return True
    return False
