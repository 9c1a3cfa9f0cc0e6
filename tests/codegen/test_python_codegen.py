"""Python code generation: the forms nodes are written in, constants, frees, and the
guarantee that the shown source is exactly the code that runs and that nothing in
a graph can inject code (hypothesis)."""
import ast
import builtins
import collections
import math
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import GraphError, nn, ops
from fxkit.codegen import Namespace, generate_forward
from fxkit.graph import Graph, GraphModule
from tests.graph.builders import MyModule, my_module_graph, randn


def _structure(tree):
    return ast.dump(tree, include_attributes=False)


def _check_source_is_the_code(code):
    """The rendered source parses back to the very tree that was compiled, and (when
    compiled from the tree) every statement sits on the line the source shows it."""
    parsed = ast.parse(code.src)
    assert _structure(parsed) == _structure(code.tree)
    if code._one_line_each:
        ours = [s.lineno for s in code.tree.body[0].body]
        assert ours == [s.lineno for s in parsed.body[0].body]


def _forward(graph, root=None):
    gm = GraphModule(root if root is not None else nn.Module(), graph)
    _check_source_is_the_code(gm.__dict__["_python_code"])
    return gm


def _body(gm):
    return gm.code.split("\n")[1:]


def test_my_module_code():
    gm = _forward(my_module_graph(), MyModule())
    assert gm.code == (
        "def forward(self, x):\n"
        "    param = self.param\n"
        "    add = x + param\n"
        "    x = param = None\n"
        "    linear = self.linear(add)\n"
        "    add = None\n"
        "    clamp = ops.clamp(linear, min=0.0, max=1.0)\n"
        "    linear = None\n"
        "    return clamp\n")


BINARY = [("add", "+", np.add), ("sub", "-", np.subtract), ("mul", "*", np.multiply),
          ("div", "/", np.divide), ("floor_divide", "//", np.floor_divide), ("remainder", "%", np.mod),
          ("pow", "**", np.power), ("matmul", "@", np.matmul), ("eq", "==", np.equal),
          ("ne", "!=", np.not_equal), ("lt", "<", np.less), ("le", "<=", np.less_equal),
          ("gt", ">", np.greater), ("ge", ">=", np.greater_equal)]


@pytest.mark.parametrize("name,symbol,reference", BINARY, ids=[b[0] for b in BINARY])
def test_binary_operators(name, symbol, reference, rng):
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    g.output(g.call(getattr(ops, name), (x, y)))
    gm = _forward(g)
    assert f"    {name} = x {symbol} y" in gm.code
    a = rng.random((3, 3)) + 0.5
    b = rng.random((3, 3)) + 0.5
    out = gm(fxkit.from_numpy(a), fxkit.from_numpy(b)).numpy()
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-12)


@pytest.mark.parametrize("name,symbol", [("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^")])
def test_bitwise_operators(name, symbol, rng):
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    g.output(g.call(getattr(ops, name), (x, y)))
    gm = _forward(g)
    assert f"    {name} = x {symbol} y" in gm.code
    a, b = rng.integers(0, 64, 5), rng.integers(0, 64, 5)
    expected = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[symbol](a, b)
    np.testing.assert_array_equal(gm(fxkit.from_numpy(a), fxkit.from_numpy(b)).numpy(), expected)


def test_unary_operators_and_abs(rng):
    g = Graph()
    x, i = g.placeholder("x"), g.placeholder("i")
    neg = g.call(ops.neg, (x,))
    inv = g.call(ops.bitwise_not, (i,))
    absolute = g.call(ops.abs, (neg,))
    g.output((absolute, inv))
    gm = _forward(g)
    assert "neg = -x" in gm.code and "bitwise_not = ~i" in gm.code
    assert "abs_1 = ops.abs(neg)" in gm.code or "abs = ops.abs(neg)" in gm.code
    a, b = rng.standard_normal(4), rng.integers(-9, 9, 4)
    out_abs, out_inv = gm(fxkit.from_numpy(a), fxkit.from_numpy(b))
    np.testing.assert_array_equal(out_abs.numpy(), np.abs(a))
    np.testing.assert_array_equal(out_inv.numpy(), ~b)


def test_keyword_arguments_and_extra_args_use_the_op():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    g.output(g.call(ops.add, (x, y), {"alpha": 2}))
    assert "add = ops.add(x, y, alpha=2)" in _forward(g).code


def test_getitem_forms(rng):
    g = Graph()
    x = g.placeholder("x")
    a = g.call(ops.getitem, (x, (slice(None, None, None), 0)))
    b = g.call(ops.getitem, (x, (slice(1, None, 2), Ellipsis, None)))
    c = g.call(ops.getitem, (x, slice(None, -1)))
    d = g.call(ops.getitem, (x, ((0, 1), slice(None, 2))))
    g.output((a, b, c, d))
    gm = _forward(g)
    for line in ["getitem = x[:, 0]", "getitem_1 = x[1::2, ..., None]", "getitem_2 = x[:-1]",
                 "getitem_3 = x[(0, 1), :2]"]:
        assert line in gm.code
    data = rng.standard_normal((4, 3))
    outs = gm(fxkit.from_numpy(data))
    for out, expected in zip(outs, [data[:, 0], data[1::2, ..., None], data[:-1], data[(0, 1), :2]]):
        np.testing.assert_array_equal(out.numpy(), expected)


def test_nested_slices_outside_subscripts_use_slice():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call(ops.getitem, (x, ((slice(1, 2),), 0))))
    assert "getitem = x[(slice(1, 2, None),), 0]" in _forward(g).code


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(3, 3), nn.ReLU())


def test_submodule_paths(rng):
    g = Graph()
    x = g.placeholder("x")
    y = g.call("layer1.0", (x,))
    z = g.call(ops.matmul, (y, g.get_attr("layer1.0.weight")))
    g.output(g.call("layer1.1", (z,)))
    model = Blocks()
    gm = _forward(g, model)
    assert "layer1_0 = getattr(self.layer1, '0')(x)" in gm.code
    assert "layer1_0_weight = getattr(self.layer1, '0').weight" in gm.code
    assert "layer1_1 = getattr(self.layer1, '1')(matmul)" in gm.code
    x_value = randn(rng, 2, 3)
    w = model.layer1[0].weight.numpy().astype(np.float64)
    b = model.layer1[0].bias.numpy().astype(np.float64)
    expected = np.maximum((x_value.numpy() @ w.T + b) @ w, 0)
    np.testing.assert_allclose(gm(x_value).numpy(), expected, rtol=1e-5, atol=1e-6)


class Node(types.SimpleNamespace):
    """A stand-in node: codegen reads only op, target, args, kwargs and name."""


def test_generates_from_any_node_objects():
    x = Node(op="placeholder", target="x", args=(), kwargs={}, name="x")
    part = Node(op="get_attr", target="class.0.import", args=(), kwargs={}, name="weight")
    out = Node(op="output", target="output", args=((x, part),), kwargs={}, name="output")
    source, globals_dict = generate_forward([x, part, out])
    assert source == ("def forward(self, x):\n"
                      "    weight = getattr(getattr(getattr(self, 'class'), '0'), 'import')\n"
                      "    return (x, weight)\n")
    assert set(globals_dict) == {"fxkit", "ops"}


def helper(value, **kwargs):
    return value, kwargs


Pair = collections.namedtuple("Pair", "first second")


def test_constants():
    g = Graph()
    x = g.placeholder("x")
    array = np.arange(3)
    consts = {"dtype": fxkit.float32, "device": fxkit.device("cpu"), "neg": -3, "negzero": -0.0,
              "inf": math.inf, "minf": -math.inf, "nan": math.nan, "imag": 2j, "cplx": 1 + 2j,
              "none": None, "dots": Ellipsis, "data": b"\x00b", "nested": {"k": [1, (2, x)]},
              "array": array, "pair": Pair(x, 1), "op": ops.relu, "func": helper}
    node = g.call(helper, (x,), consts)
    g.output(node)
    gm = _forward(g)
    code = gm.code
    for text in ["dtype=fxkit.float32", "device=fxkit.device('cpu')", "neg=-3", "negzero=-0.0",
                 "inf=inf", "minf=-inf", "nan=nan", "imag=2j", "none=None", "dots=...", "data=b'\\x00b'",
                 "nested={'k': [1, (2, x)]}", "op=ops.relu", "func=helper_1", "pair=Pair(x, 1)",
                 "helper = helper_1(x,"]:
        assert text in code
    _, kwargs = gm(5)
    assert kwargs["dtype"] is fxkit.float32 and kwargs["device"] is fxkit.device("cpu")
    assert math.copysign(1, kwargs["negzero"]) < 0 and kwargs["inf"] == math.inf and math.isnan(kwargs["nan"])
    assert kwargs["cplx"] == 1 + 2j and kwargs["array"] is array and kwargs["pair"] == Pair(5, 1)
    assert kwargs["nested"] == {"k": [1, (2, 5)]} and kwargs["func"] is helper and kwargs["dots"] is Ellipsis


def test_negative_constants_keep_their_meaning():
    g = Graph()
    x = g.placeholder("x")
    p = g.call(ops.pow, (-2, x))
    q = g.call(getattr, (-1.5, "real"))
    g.output((p, q))
    gm = _forward(g)
    assert "pow = (-2) ** x" in gm.code and "getattr_1 = (-1.5).real" in gm.code
    assert gm(2) == (4, -1.5)


def test_builtin_getattr_target():
    g = Graph()
    x = g.placeholder("x")
    d = g.call(getattr, (x, "dtype"))
    e = g.call(getattr, (x, "not an identifier", None))
    g.output((d, e))
    gm = _forward(g)
    assert "getattr_1 = x.dtype" in gm.code
    assert "getattr_2 = getattr(x, 'not an identifier', None)" in gm.code
    assert gm(fxkit.ones(2)) == (fxkit.float32, None)


def test_values_are_freed_after_last_use():
    g = Graph()
    x = g.placeholder("x")
    unused = g.call(ops.neg, (x,))
    a = g.call(ops.relu, (x,))
    b = g.call(ops.exp, (a,))
    g.output(g.call(ops.add, (a, b)))
    body = _body(_forward(g))
    assert body[:7] == ["    neg = -x", "    neg = None", "    relu = ops.relu(x)", "    x = None",
                        "    exp = ops.exp(relu)", "    add = relu + exp", "    relu = exp = None"]
    assert body[7] == "    return add"
    assert unused.name == "neg"


def test_placeholder_defaults():
    g = Graph()
    x = g.placeholder("x")
    s = g.placeholder("scale", default=2.5)
    t = g.placeholder("tag", default="a\nb")
    g.output((g.call(ops.mul, (x, s)), t))
    gm = _forward(g)
    assert gm.code.startswith("def forward(self, x, scale=2.5, tag='a\\nb'):")
    assert gm(2) == (5.0, "a\nb")
    bad = Graph()
    bad.placeholder("x", default=1)
    bad.placeholder("y")
    bad.output(None)
    with pytest.raises(GraphError, match="placeholder %y has no default but follows a placeholder with one"):
        bad.python_code()


def test_operators_on_python_values_follow_python():
    g = Graph()
    x = g.placeholder("x")
    size = g.call(ops.getitem, (x, 0))
    g.output(g.call(ops.floor_divide, (g.call(ops.mul, (size, 3)), 2)))
    gm = _forward(g)
    assert gm((7, 1)) == 10 and type(gm((7, 1))) is int


def test_unregistered_op_becomes_a_global():
    private = fxkit.runtime.op.Op("private_relu", ops.relu.impl, kind="elementwise", promote="common")
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call(private, (x,)))
    gm = _forward(g)
    assert "private_relu = private_relu_1(x)" in gm.code
    np.testing.assert_array_equal(gm(fxkit.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])


def test_string_with_newline_compiles_from_the_source():
    g = Graph()
    x = g.placeholder("x")
    first = g.call(helper, (x,), {"text": "line one\nline two"})
    g.output(g.call(helper, (first,)))
    code = g.python_code()
    assert not code._one_line_each
    _check_source_is_the_code(code)
    gm = _forward(g)
    assert gm(1)[0] == ((1, {"text": "line one\nline two"}))


def test_namespace():
    ns = Namespace(reserved=("root",))
    names = [ns.create_name(c) for c in ["add", "add", "add_1", "root", "1x", "a.b-c", "", "lambda", "ﬁ"]]
    assert names == ["add", "add_1", "add_2", "root_1", "_1x", "a_b_c", "_", "lambda_1", "fi"]
    obj = object()
    assert ns.create_name("thing", obj) == ns.create_name("other", obj) == "thing"


@settings(max_examples=200, deadline=None)
@given(candidates=st.lists(st.text(max_size=10), max_size=12))
def test_namespace_names_are_unique_plain_identifiers(candidates):
    from fxkit.codegen.namespace import RESERVED, is_plain_identifier

    ns = Namespace()
    names = [ns.create_name(c) for c in candidates]
    assert len(set(names)) == len(names)
    assert all(is_plain_identifier(n) and n not in RESERVED for n in names)
    assert all(ast.parse(f"{n} = 1").body[0].targets[0].id == n for n in names)


# -- nothing in a graph can inject code ---------------------------------------------------
PAYLOADS = ["canary()", "x); canary(); (", "'\ncanary()\n'", "\"\"\"; canary() #", "return canary()",
            "lambda: canary()", "self", "__import__('os')", "\\", "'''", "\n", "λ", "ﬁx", "fix", "1e309",
            "__debug__", "None", "yield", "ops", "fxkit", "getattr", "slice", "x\u2028canary()"]
text = st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=12),
                 st.builds(lambda a, b: a + b, st.sampled_from(PAYLOADS), st.text(max_size=6)))


@pytest.fixture
def canary(monkeypatch):
    fired = []
    monkeypatch.setattr(builtins, "canary", lambda: fired.append(True), raising=False)
    return fired


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(text, min_size=3, max_size=3), keys=st.lists(text, min_size=1, max_size=3),
       values=st.lists(text, min_size=1, max_size=3), attr=text)
def test_no_injection(canary, names, keys, values, attr):
    g = Graph()
    a = g.placeholder(names[0])
    b = g.placeholder(names[1], default=values[0])
    kwargs = dict(zip(keys, values))
    call = g.call(helper, ((a, b),), kwargs, name=names[2])
    picked = g.call(ops.getitem, (call, 1), name=values[-1])
    g.output({"kwargs": picked, "attr": g.call(getattr, (a, attr, values[0]))})
    g.lint()
    gm = _forward(g)
    result = gm(types.SimpleNamespace())
    assert result["kwargs"] == kwargs
    assert result["attr"] == getattr(types.SimpleNamespace(), attr, values[0])
    assert gm(7, "given")["kwargs"] == kwargs
    assert not canary


class _Attributes:
    """An object whose every attribute, ``__dict__`` and other dunders included, is read from a dict
    (a ``SimpleNamespace`` cannot hold an attribute named ``__dict__``)."""

    def __init__(self, attributes):
        object.__setattr__(self, "_attributes", attributes)

    def __getattribute__(self, name):
        return object.__getattribute__(self, "_attributes")[name]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(text, min_size=1, max_size=3), value=text)
def test_no_injection_through_attribute_paths(canary, path, value):
    g = Graph()
    g.placeholder("x")
    g.output(g.get_attr(".".join(path)))
    code = g.python_code()
    _check_source_is_the_code(code)
    parts = ".".join(path).split(".")
    root = value
    for part in reversed(parts):
        root = _Attributes({part: root})
    namespace = dict(code.globals)
    exec(compile(code.src, "<test>", "exec"), namespace)
    assert namespace["forward"](root, 0) == value
    assert not canary


def test_operator_table_covers_the_registry_operators():
    from fxkit.codegen.python import _OPERATOR_FORMS
    from fxkit.runtime.tensor_methods import OPERATORS

    written = {op.name for op in _OPERATOR_FORMS}
    assert {name for name, _ in OPERATORS.values()} <= written
    assert "abs" not in written  # abs() could be shadowed by a node named abs
    assert {"neg", "bitwise_not"} <= written


def test_code_is_generated_once_per_graph_version():
    g = my_module_graph()
    first = g.python_code()
    assert g.python_code() is first and g.python_code(root="this") is not first
    g.find_nodes(target=ops.clamp)[0].kwargs = {"min": 0.5}
    second = g.python_code()
    assert second is not first and "min=0.5" in second.src


def test_stray_node_is_an_error():
    g = Graph()
    x = g.placeholder("x")
    gone = g.call(ops.neg, (x,))
    g.erase_node(gone)
    g.output(g.call(ops.relu, (gone,)))
    with pytest.raises(GraphError, match="a node reads %neg, which is not in the graph"):
        g.python_code()
