"""Hypothesis strategies for random programs of registry ops, for "every pass keeps outputs equal".

A `RandomProgram` is a list of steps (graph inputs, parameters and op calls)
drawn one at a time while the program runs eagerly on fresh random tensors,
so every step is valid for the actual shapes it sees: elementwise unary and
binary ops with broadcasting and Python scalars, comparisons feeding
``where``/``masked_fill``, reductions, views (``chunk`` + ``getitem``
included) and matmul/linear against parameters. Programs also repeat earlier
steps (CSE has work), leave values unused (DCE has work) and compute on
parameters alone (constant folding has work).

The same program comes three ways, all computing the same thing:

* ``program.graph_module()``: a `GraphModule` built directly as a `Graph`
  (parameters become ``get_attr`` of a dict root);
* ``program.module()``: an ``fxkit.nn.Module`` whose ``forward`` replays the
  steps, for ``symbolic_trace`` or eager runs;
* ``program.expected``: the eager result computed while drawing.

Example:
    >>> @given(dags())
    ... def test_my_pass(program):
    ...     gm = my_pass(program.graph_module())
    ...     assert_same(gm(*program.inputs), program.expected)
"""
import inspect

import numpy as np
from hypothesis import strategies as st

import fxkit
from fxkit import nn, ops
from fxkit.graph import Graph, GraphModule

KINDS = ("elementwise", "reduction", "view", "matmul")

_UNARY = (ops.neg, ops.abs, ops.exp, ops.tanh, ops.sigmoid, ops.sin, ops.cos, ops.relu, ops.gelu, ops.silu,
          ops.erf, ops.floor, ops.ceil, ops.round, ops.sign, ops.expm1)
# Ops defined on part of the real line get ``abs(x) + 1`` first: values stay finite and readable.
_GUARDED_UNARY = (ops.log, ops.log1p, ops.sqrt, ops.rsqrt, ops.reciprocal)
_BINARY = (ops.add, ops.sub, ops.mul, ops.maximum, ops.minimum)
_COMPARE = (ops.gt, ops.lt, ops.ge, ops.le, ops.eq, ops.ne)
_REDUCE = (ops.sum, ops.mean, ops.amax, ops.amin)


class Ref:
    """A step's argument standing for the value of step ``index``."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return f"v{self.index}"


def _resolve(value, lookup):
    if type(value) is Ref:
        return lookup(value.index)
    if type(value) in (tuple, list):
        return type(value)(_resolve(v, lookup) for v in value)
    if type(value) is dict:
        return {k: _resolve(v, lookup) for k, v in value.items()}
    return value


class RandomProgram:
    """A random straight-line program of registry ops (see the module docstring).

    Attributes:
        inputs: the graph inputs (Tensors), one per placeholder.
        params: name -> Tensor read through ``get_attr``.
        steps: ``("input", i)``, ``("param", name)`` or ``("call", op, args, kwargs)``,
            args holding `Ref`s to earlier steps.
        outputs: the step indices returned (one index, or a tuple of them).
        expected: the eager result of the program on ``inputs``.
    """

    def __init__(self):
        self.inputs = []
        self.params = {}
        self.steps = []
        self.values = []
        self.outputs = None
        self.expected = None

    # -- the three forms --------------------------------------------------------------
    def graph(self):
        """The program as a `Graph` (placeholders first, get_attr at first use)."""
        g = Graph()
        nodes = {}
        placeholders = [g.placeholder(f"x{i}") for i in range(len(self.inputs))]
        for index, step in enumerate(self.steps):
            if step[0] == "input":
                nodes[index] = placeholders[step[1]]
            elif step[0] == "param":
                nodes[index] = g.get_attr(step[1])
            else:
                _, op, args, kwargs = step
                nodes[index] = g.call(op, _resolve(args, nodes.__getitem__), _resolve(kwargs, nodes.__getitem__))
        g.output(_resolve(self._output_refs(), nodes.__getitem__))
        return g

    def graph_module(self):
        """A `GraphModule` over `graph`, its parameters held in a dict root."""
        return GraphModule(dict(self.params), self.graph())

    def module(self):
        """An ``fxkit.nn.Module`` replaying the steps in ``forward(x0, x1, ...)`` (traceable)."""
        def forward(module, *inputs):
            return self.run(inputs, {name: getattr(module, name) for name in self.params})

        # The tracer makes one placeholder per named argument: name them like `graph`'s.
        named = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                 for name in ["self"] + [f"x{i}" for i in range(len(self.inputs))]]
        forward.__signature__ = inspect.Signature(named)
        cls = type("RandomModule", (nn.Module,), {"forward": forward})
        module = cls()
        for name, value in self.params.items():
            setattr(module, name, nn.Parameter(value))
        return module

    def run(self, inputs, params):
        """Run the steps eagerly on ``inputs`` and ``params`` (name -> Tensor)."""
        values = []
        for step in self.steps:
            if step[0] == "input":
                values.append(inputs[step[1]])
            elif step[0] == "param":
                values.append(params[step[1]])
            else:
                _, op, args, kwargs = step
                values.append(op(*_resolve(args, values.__getitem__), **_resolve(kwargs, values.__getitem__)))
        return _resolve(self._output_refs(), values.__getitem__)

    def _output_refs(self):
        if type(self.outputs) is tuple:
            return tuple(Ref(i) for i in self.outputs)
        return Ref(self.outputs)

    def __repr__(self):
        shapes = ", ".join(f"{tuple(t.shape)}:{t.dtype}" for t in self.inputs)
        return f"RandomProgram(inputs=[{shapes}])\n{self.graph()}"


class _Builder:
    """Draws one program step by step, running each step as it is drawn."""

    def __init__(self, draw, kinds, dag):
        self.draw = draw
        self.kinds = kinds
        self.dag = dag
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        self.program = RandomProgram()

    # -- values ---------------------------------------------------------------------
    def _add(self, step, value):
        self.program.steps.append(step)
        self.program.values.append(value)
        return Ref(len(self.program.steps) - 1)

    def value(self, ref):
        return self.program.values[ref.index]

    def call(self, op, *args, **kwargs):
        value = op(*_resolve(args, self.program.values.__getitem__),
                   **_resolve(kwargs, self.program.values.__getitem__))
        return self._add(("call", op, args, kwargs), value)

    def source(self, shape, param=None, dtype=None):
        """A fresh graph input, or a parameter when ``param`` (both drawn when None)."""
        if param is None:
            param = self.draw(st.booleans())
        if dtype is None:
            dtype = np.float64 if self.draw(st.integers(0, 9)) == 0 else np.float32
        data = fxkit.from_numpy(self.rng.uniform(-2.0, 2.0, size=shape).astype(dtype))
        if param:
            name = f"p{len(self.program.params)}"
            self.program.params[name] = data
            return self._add(("param", name), data)
        self.program.inputs.append(data)
        return self._add(("input", len(self.program.inputs) - 1), data)

    def random_shape(self):
        return tuple(self.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))

    def pick(self):
        """An earlier floating-point value (the latest one in a chain)."""
        values = self.program.values
        if not self.dag:
            return Ref(len(values) - 1)
        return Ref(self.draw(st.sampled_from([i for i, v in enumerate(values) if _floating(v)])))

    def partner(self, ref):
        """Something broadcasting with ``ref``: a scalar, an earlier value or a new source."""
        shape = self.value(ref).shape
        choice = self.draw(st.integers(0, 3))
        if choice == 0:
            return self.draw(st.sampled_from([2.0, 0.5, -1.5, 3]))
        if choice == 1 and self.dag:
            fits = [i for i, v in enumerate(self.program.values) if _floating(v) and _broadcasts(v.shape, shape)]
            return Ref(self.draw(st.sampled_from(fits)))
        keep = self.draw(st.integers(0, len(shape)))
        trailing = [d if self.draw(st.booleans()) else 1 for d in shape[len(shape) - keep:]]
        return self.source(tuple(trailing))

    # -- steps ----------------------------------------------------------------------
    def step(self):
        kind = self.draw(st.sampled_from(self.kinds))
        if self.dag and len(self.program.steps) > 1 and self.draw(st.integers(0, 7)) == 0:
            return self.repeat()
        x = self.pick()
        return getattr(self, kind)(x)

    def repeat(self):
        """An earlier call again with the same arguments (a common subexpression)."""
        calls = [s for s in self.program.steps if s[0] == "call" and s[1].pure]
        if not calls:
            return self.elementwise(self.pick())
        _, op, args, kwargs = self.draw(st.sampled_from(calls))
        return self.call(op, *args, **kwargs)

    def elementwise(self, x):
        form = self.draw(st.sampled_from(("unary", "guarded", "binary", "binary", "div", "pow", "select",
                                          "clamp", "leaky_relu")))
        if form == "unary":
            return self.call(self.draw(st.sampled_from(_UNARY)), x)
        if form == "guarded":
            return self.call(self.draw(st.sampled_from(_GUARDED_UNARY)), self.positive(x))
        if form == "binary":
            op = self.draw(st.sampled_from(_BINARY))
            y = self.partner(x)
            if type(y) is Ref and self.draw(st.booleans()):
                x, y = y, x
            if op in (ops.add, ops.sub) and self.draw(st.booleans()):
                return self.call(op, x, y, alpha=2)
            return self.call(op, x, y)
        if form == "div":
            y = self.partner(x)
            return self.call(ops.div, x, self.positive(y) if type(y) is Ref else y)
        if form == "pow":
            return self.call(ops.pow, self.positive(x), self.draw(st.sampled_from([2, 3, 0.5, -1.0])))
        if form == "select":
            return self.select(x)
        if form == "clamp":
            return self.call(ops.clamp, x, min=-0.5, max=self.draw(st.sampled_from([0.5, None])))
        return self.call(ops.leaky_relu, x, 0.1)

    def positive(self, x):
        """``abs(x) + 1``: an operand inside every guarded op's domain."""
        return self.call(ops.add, self.call(ops.abs, x), 1.0)

    def select(self, x):
        compare = self.draw(st.sampled_from(_COMPARE))
        if self.draw(st.booleans()):
            return self.call(ops.masked_fill, x, self.call(compare, x, 0.25), -1.0)
        condition = self.call(compare, x, self.partner(x))
        other = self.partner(x)
        return self.call(ops.where, condition, x, other)

    def reduction(self, x):
        if self.value(x).ndim == 0:
            x = self.call(ops.reshape, x, 1)
        ndim = self.value(x).ndim
        dim = self.draw(st.integers(-ndim, ndim - 1))
        form = self.draw(st.sampled_from(("reduce", "softmax", "all")))
        if form == "softmax":
            return self.call(self.draw(st.sampled_from((ops.softmax, ops.log_softmax))), x, dim=dim)
        op = self.draw(st.sampled_from(_REDUCE))
        if form == "all" and op in (ops.sum, ops.mean):
            return self.call(op, x)
        return self.call(op, x, dim=dim, keepdim=self.draw(st.booleans()))

    def view(self, x):
        shape = self.value(x).shape
        ndim = len(shape)
        if ndim == 0:
            return self.call(ops.reshape, x, 1, 1)
        dim = self.draw(st.integers(0, ndim - 1))
        form = self.draw(st.sampled_from(("reshape", "permute", "transpose", "unsqueeze", "expand",
                                          "slice", "chunk", "narrow", "flatten")))
        if form == "reshape":
            return self.call(ops.reshape, x, -1) if ndim > 1 else self.call(ops.reshape, x, 1, shape[0])
        if form == "permute":
            order = self.draw(st.permutations(range(ndim)))
            return self.call(ops.permute, x, *order)
        if form == "transpose":
            return self.call(ops.transpose, x, dim, self.draw(st.integers(-ndim, ndim - 1)))
        if form == "unsqueeze":
            return self.call(ops.unsqueeze, x, self.draw(st.integers(-ndim - 1, ndim)))
        if form == "expand":
            squeezed = self.call(ops.unsqueeze, x, 0)
            return self.call(ops.expand, squeezed, self.draw(st.integers(1, 3)), *([-1] * ndim))
        if form == "slice":
            index = (slice(None),) * dim + (slice(self.draw(st.integers(0, shape[dim] - 1)), None,
                                                  self.draw(st.integers(1, 2))),)
            return self.call(ops.getitem, x, index)
        if form == "chunk":
            pieces = self.call(ops.chunk, x, self.draw(st.integers(1, 3)), dim)
            count = len(self.value(pieces))
            return self.call(ops.getitem, pieces, self.draw(st.integers(0, count - 1)))
        if form == "narrow":
            start = self.draw(st.integers(0, shape[dim] - 1))
            return self.call(ops.narrow, x, dim, start, self.draw(st.integers(1, shape[dim] - start)))
        return self.call(ops.flatten, x, self.draw(st.integers(0, ndim - 1)))

    def matmul(self, x):
        shape = self.value(x).shape
        if len(shape) == 0:
            x = self.call(ops.reshape, x, 1)
            shape = (1,)
        n = self.draw(st.integers(1, 5))
        dtype = self.value(x).dtype.np  # matmul and linear take one dtype
        if self.draw(st.booleans()):
            weight = self.source((n, shape[-1]), param=True, dtype=dtype)
            bias = self.source((n,), param=True, dtype=dtype) if self.draw(st.booleans()) else None
            return self.call(ops.linear, x, weight, bias)
        return self.call(ops.matmul, x, self.source((shape[-1], n), dtype=dtype))

    def finish(self, size):
        program = self.program
        self.source(self.random_shape(), param=False)
        if self.dag and self.draw(st.booleans()):
            self.source(self.random_shape())
        for _ in range(size):
            self.step()
        last = len(program.steps) - 1
        others = [i for i, s in enumerate(program.steps) if s[0] == "call" and i != last]
        extra = self.draw(st.lists(st.sampled_from(others), max_size=2, unique=True)) if others and self.dag else []
        program.outputs = tuple([last] + extra) if extra or self.draw(st.booleans()) else last
        program.expected = _resolve(program._output_refs(), program.values.__getitem__)
        return program


def _floating(value):
    return isinstance(value, fxkit.Tensor) and value.dtype.is_floating_point


def _broadcasts(a, b):
    """True when shape ``a`` broadcasts to shape ``b`` (the result keeps ``b``'s shape)."""
    if len(a) > len(b):
        return False
    return all(x == y or x == 1 for x, y in zip(a[::-1], b[::-1]))


@st.composite
def programs(draw, kinds=KINDS, dag=True, min_steps=1, max_steps=12):
    """Random programs of registry ops.

    Args:
        kinds: the op kinds drawn from (a subset of `KINDS`).
        dag: steps read any earlier value (several uses, several outputs); False
            gives a chain where each step reads the previous one.
        min_steps: the fewest steps drawn (guard steps like ``abs(x) + 1`` come on top).
        max_steps: the most steps drawn.
    """
    size = draw(st.integers(min_steps, max_steps), label="steps")
    return _Builder(draw, tuple(kinds), dag).finish(size)


def chains(kinds=KINDS, max_steps=12):
    """Programs where each step reads the one before (plus scalars and fresh sources)."""
    return programs(kinds=kinds, dag=False, max_steps=max_steps)


def dags(kinds=KINDS, max_steps=12):
    """Programs whose steps read any earlier values; several outputs."""
    return programs(kinds=kinds, dag=True, max_steps=max_steps)
