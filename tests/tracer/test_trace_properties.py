"""Property tests: generated programs of registry ops trace into graphs that run
exactly like eager, through every path and every round trip."""
import copy
import pickle
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxkit
from fxkit import nn
from tests.tracer.paths import assert_same

# op name -> spellings; every spelling must be recorded as the same op.
UNARY = {
    "relu": [lambda a: a.relu(), lambda a: fxkit.relu(a), lambda a: nn.functional.relu(a)],
    "neg": [lambda a: -a, lambda a: a.neg()],
    "abs": [lambda a: abs(a), lambda a: a.abs()],
    "tanh": [lambda a: a.tanh(), lambda a: fxkit.tanh(a)],
    "sigmoid": [lambda a: a.sigmoid(), lambda a: fxkit.ops.sigmoid(a)],
    "sin": [lambda a: a.sin(), lambda a: fxkit.sin(a)],
    "sum": [lambda a: a.sum(-1, keepdim=True), lambda a: fxkit.sum(a, dim=-1, keepdim=True)],
    "mean": [lambda a: a.mean(0, keepdim=True)],
}
BINARY = {
    "add": [lambda a, b: a + b, lambda a, b: a.add(b), lambda a, b: fxkit.add(a, b)],
    "sub": [lambda a, b: a - b, lambda a, b: fxkit.sub(a, b)],
    "mul": [lambda a, b: a * b, lambda a, b: a.mul(b)],
    "maximum": [lambda a, b: fxkit.maximum(a, b), lambda a, b: a.maximum(b)],
    "minimum": [lambda a, b: fxkit.minimum(a, b)],
}
SCALAR = {
    "add": [lambda a, c: a + c, lambda a, c: c + a],
    "mul": [lambda a, c: a * c, lambda a, c: c * a],
    "sub": [lambda a, c: a - c],
    "div": [lambda a, c: a / c],
}


@st.composite
def programs(draw, chain=False):
    """Steps ``(op name, spelling, input indices, scalar)`` over values ``[x, y, step results...]``."""
    steps = []
    for i in range(draw(st.integers(1, 12))):
        count = i + 2
        pick = (lambda: count - 1) if chain else (lambda: draw(st.integers(0, count - 1)))
        kind = draw(st.sampled_from(["unary", "binary", "scalar"]))
        table = {"unary": UNARY, "binary": BINARY, "scalar": SCALAR}[kind]
        name = draw(st.sampled_from(sorted(table)))
        spelling = draw(st.integers(0, len(table[name]) - 1))
        inputs = (pick(),) if kind != "binary" else (pick(), draw(st.integers(0, count - 1)))
        scalar = draw(st.sampled_from([0.5, 2, -1.5, 3.0])) if kind == "scalar" else None
        steps.append((kind, name, spelling, inputs, scalar))
    outputs = draw(st.integers(1, 2))
    return steps, outputs


def make_function(program):
    steps, outputs = program

    def f(x, y):
        values = [x, y]
        for kind, name, spelling, inputs, scalar in steps:
            fn = {"unary": UNARY, "binary": BINARY, "scalar": SCALAR}[kind][name][spelling]
            args = [values[i] for i in inputs]
            values.append(fn(*args, scalar) if kind == "scalar" else fn(*args))
        return values[-1] if outputs == 1 else (values[-1], values[-2])
    return f


def random_inputs(seed):
    rng = np.random.default_rng(seed)
    return tuple(fxkit.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)) for _ in range(2))


def check_program(program, seed):
    f = make_function(program)
    gm = fxkit.symbolic_trace(f)
    gm.graph.lint()
    recorded = [n.target.name for n in gm.graph.find_nodes(op="call")]
    assert recorded == [name for _, name, _, _, _ in program[0]]
    x, y = random_inputs(seed)
    expected = f(x, y)
    assert_same(gm(x, y), expected, "GraphModule")
    assert_same(fxkit.Interpreter(gm).run(x, y), expected, "Interpreter")
    assert_same(fxkit.Transformer(gm).transform()(x, y), expected, "Transformer")
    return gm, (x, y), expected


@settings(max_examples=60, deadline=None)
@given(programs(chain=True), st.integers(0, 2**32 - 1))
def test_random_chains_run_equal_to_eager(program, seed):
    check_program(program, seed)


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_dags_run_equal_to_eager(program, seed):
    check_program(program, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_round_trips_preserve_outputs(program, seed):
    gm, inputs, expected = check_program(program, seed)
    assert_same(copy.deepcopy(gm)(*inputs), expected, "deepcopy")
    assert_same(pickle.loads(pickle.dumps(gm))(*inputs), expected, "pickle")
    with tempfile.TemporaryDirectory() as tmp:
        fxkit.save(gm, Path(tmp) / "m.zip")
        assert_same(fxkit.load(Path(tmp) / "m.zip")(*inputs), expected, "save/load")


# Names and strings a user can put into a traced graph: quotes, newlines, keywords, unicode.
awkward_text = st.one_of(
    st.text(min_size=1, max_size=20),
    st.sampled_from(["class", "return", "self", "fxkit", "ops", "__import__", "x = 1\nimport os",
                     "'); __import__('os').system('touch pwned') #", '"""', "\\", "ünï cödé", "𝔵", "a.b"]),
)


@settings(max_examples=50, deadline=None)
@given(key=awkward_text, seed=st.integers(0, 2**32 - 1))
def test_string_constants_are_data_not_code(key, seed):
    def f(table, x):
        return table[key] * x + 1

    gm = fxkit.symbolic_trace(f)
    x, t = random_inputs(seed)
    table = {key: t}
    expected = t * x + 1
    assert_same(gm(table, x), expected)
    with tempfile.TemporaryDirectory() as tmp:
        fxkit.save(gm, Path(tmp) / "m")
        assert_same(fxkit.load(Path(tmp) / "m")(table, x), expected)
        assert not (Path(tmp) / "pwned").exists() and not Path("pwned").exists()


class Awkward(nn.Module):
    """A module whose one parameter has an arbitrary name."""

    def __init__(self, name, weight):
        super().__init__()
        self.key = name
        self.register_parameter(name, nn.Parameter(weight))

    def forward(self, x):
        return x * getattr(self, self.key)


@settings(max_examples=50, deadline=None)
@given(name=awkward_text.filter(lambda s: "." not in s and s != "key" and not hasattr(Awkward, s)
                                and not hasattr(nn.Module(), s)),
       seed=st.integers(0, 2**32 - 1))
def test_awkward_attribute_names_trace_and_round_trip(name, seed):
    x, w = random_inputs(seed)
    gm = fxkit.symbolic_trace(Awkward(name, w))
    assert [n.target for n in gm.graph.find_nodes(op="get_attr")] == [name]
    assert_same(gm(x), x * w)
    assert_same(pickle.loads(pickle.dumps(gm))(x), x * w)
    with tempfile.TemporaryDirectory() as tmp:
        fxkit.save(gm, Path(tmp) / "m")
        assert_same(fxkit.load(Path(tmp) / "m")(x), x * w)
