"""fuse_elementwise / FusedOp: grouping, printing, codegen, copies, and exact outputs."""
import copy
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fxkit
from fxkit import nn, ops
from fxkit.errors import GraphError, ShapeError
from fxkit.graph import Graph, GraphModule, Interpreter, Transformer
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms import ShapeProp, estimate_cost, infer_shapes
from fxkit.transforms.fuse_elementwise import FuseElementwise, fuse_elementwise
from fxkit.transforms.fused_op import FusedOp
from tests.backends.examples import chain
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params
from tests.transforms.random_graphs import chains, dags

RANDOM = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fused_calls(gm):
    return [n for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, FusedOp)]


def body_ops(fused):
    return [n.target.name for n in fused.graph.nodes if n.op == "call"]


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


# -- the seed talk's examples ---------------------------------------------------------------
CHAIN_TEXT = """\
graph(x):
    %x     = placeholder[x]
    %mul_9 = call[fused_0](%x)
    return %mul_9

with fused_0 = graph(x):
    %x     = placeholder[x]
    %mul   = call[mul](%x, %x)
    %mul_1 = call[mul](%mul, %mul)
    %mul_2 = call[mul](%mul_1, %mul_1)
    %mul_3 = call[mul](%mul_2, %mul_2)
    %mul_4 = call[mul](%mul_3, %mul_3)
    %mul_5 = call[mul](%mul_4, %mul_4)
    %mul_6 = call[mul](%mul_5, %mul_5)
    %mul_7 = call[mul](%mul_6, %mul_6)
    %mul_8 = call[mul](%mul_7, %mul_7)
    %mul_9 = call[mul](%mul_8, %mul_8)
    return %mul_9"""


def test_square_chain_becomes_one_group(rng):
    x = fxkit.from_numpy(rng.uniform(0.999, 1.001, size=(5,)).astype(np.float32))
    gm = fuse_elementwise(fxkit.symbolic_trace(chain))
    assert str(gm.graph) == CHAIN_TEXT
    assert "mul_9 = fused_0(x)" in gm.code
    np.testing.assert_allclose(gm(x).numpy(), x.numpy().astype(np.float64) ** 1024, rtol=1e-4)
    assert_same(gm(x), chain(x))


def test_lstm_cell_pointwise_tail_is_one_group():
    model, inputs = zoo_model("lstm_cell")
    expected = model(*inputs)
    gm = fuse_elementwise(fxkit.symbolic_trace(model))
    calls = fused_calls(gm)
    assert len(calls) <= 2
    tail = sorted(op for call in calls for op in body_ops(call.target))
    assert tail == sorted(["sigmoid", "sigmoid", "tanh", "sigmoid", "mul", "mul", "add", "tanh", "mul"])
    chunk = gm.graph.find_nodes(op="call", target=ops.chunk)[0]
    assert all(chunk in _ancestors(call) for call in calls)
    text = str(gm.graph)
    assert "\n\nwith fused_0 = graph(getitem, getitem_1, getitem_2, getitem_3, cx):\n" in text
    assert "%add_1       = call[getitem](%fused_0_out, 0)" in text
    assert_same(gm(*inputs), expected)
    assert_same(Interpreter(gm).run(*inputs), expected)


def test_lstm_cell_min_size_one_fuses_the_gate_add_alone():
    model, inputs = zoo_model("lstm_cell")
    gm = fuse_elementwise(fxkit.symbolic_trace(model), min_size=1)
    assert sorted(len(body_ops(c.target)) for c in fused_calls(gm)) == [1, 9]
    assert_same(gm(*inputs), model(*inputs))


def _ancestors(node):
    seen, todo = set(), list(node.all_input_nodes)
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return seen


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_models_keep_outputs_exactly(name):
    model, inputs = zoo_model(name)
    _, transformed = check_model_paths(model, inputs, passes=[fuse_elementwise, FuseElementwise(min_size=1)])
    for gm in transformed.values():
        for call in fused_calls(gm):
            assert all(n.target.kind == "elementwise" for n in call.target.graph.nodes if n.op == "call")


# -- grouping rules ---------------------------------------------------------------------------
def test_no_group_leaves_and_reenters_through_another_node(rng):
    def f(x):
        a = x.exp()
        return (a + a.sum()).relu()       # exp -> sum -> add: exp and add cannot share a call

    x = randn(rng, 3, 4)
    gm = fuse_elementwise(fxkit.symbolic_trace(f), min_size=1)
    assert [body_ops(c.target) for c in fused_calls(gm)] == [["exp"], ["add", "relu"]]
    assert_same(gm(x), f(x))


def test_groups_never_feed_each_other_in_a_cycle(rng):
    # Merging add_2 into {add} would look safe node by node, but with {neg, add_1} fused
    # the contracted graph has {add, add_2} -> sum -> {neg, add_1} -> {add, add_2}.
    graph = Graph()
    x = graph.placeholder("x")
    neg = graph.call(ops.neg, (x,))
    add = graph.call(ops.add, (x, x))
    total = graph.call(ops.sum, (add,))
    graph.call(ops.sum, (x,))
    graph.call(ops.add, (total, neg))
    graph.call(ops.add, (add, neg))
    graph.output(graph.call(ops.add, (total, neg)))
    gm = GraphModule({}, graph)
    x = randn(rng, 3)
    expected = gm(x)
    gm = fuse_elementwise(gm, min_size=1)
    groups = [[n.name for n in c.target.graph.nodes if n.op == "call"] for c in fused_calls(gm)]
    assert sorted(groups) == [["add"], ["neg", "add_1", "add_2", "add_3"]]
    assert_same(gm(x), expected)


def test_member_used_outside_becomes_a_group_output(rng):
    def f(x, w):
        a = x * 2
        return a @ w, a.sin().abs()

    x, w = randn(rng, 3, 4), randn(rng, 4, 2)
    gm = fuse_elementwise(fxkit.symbolic_trace(f))
    (call,) = fused_calls(gm)
    assert call.name == "fused_0_out" and call.target.num_outputs == 2
    picks = list(call.users)
    assert [(p.name, p.args[1]) for p in picks] == [("mul", 0), ("abs", 1)]
    assert_same(gm(x, w), f(x, w))


def test_users_of_early_members_move_after_the_fused_call(rng):
    def f(x):
        a = x.exp()
        v = a.reshape(-1)                 # sits between the group's members
        b = a.sin()
        return v, b * 3

    x = randn(rng, 2, 3)
    gm = fuse_elementwise(fxkit.symbolic_trace(f))
    order = [n.name for n in gm.graph.nodes]
    assert order.index("fused_0_out") < order.index("reshape")
    assert_same(gm(x), f(x))


def test_shape_arithmetic_is_not_fused(rng):
    def f(x):
        return (x + 1).exp() * (x.shape[0] * 2)

    x = randn(rng, 3, 2)
    gm = fuse_elementwise(fxkit.symbolic_trace(f))
    (call,) = fused_calls(gm)
    assert [n.name for n in call.target.graph.nodes] == ["x", "mul", "add", "exp", "mul_1", "output"]
    (scalar_mul,) = gm.graph.find_nodes(op="call", target=ops.mul)
    assert scalar_mul.args == (gm.graph.find_nodes(op="call", target=ops.getitem)[0], 2)
    assert_same(gm(x), f(x))


def test_impure_calls_are_barriers(rng):
    def f(x):
        y = x * 2
        y[0] = 0.0                        # setitem mutates y: y + 1 must see it
        return (y + 1).exp()

    x = randn(rng, 3, 4)
    gm = fuse_elementwise(fxkit.symbolic_trace(f), min_size=1)
    names = [n.name for n in gm.graph.nodes]
    assert names.index("mul") < names.index("setitem") < names.index("exp")
    assert [body_ops(c.target) for c in fused_calls(gm)] == [["mul"], ["add", "exp"]]
    assert_same(gm(x), f(x))


class TwoDropouts(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Dropout(0.5)
        self.second = nn.Dropout(0.5)

    def forward(self, x):
        a = x * 2
        dropped = self.first(a)
        c = a + self.second(x)     # fusing a with c would run `second` before `first`
        return dropped, c


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_random_modules_keep_their_order_in_training(rng, training):
    model = TwoDropouts().train(training)
    x = randn(rng, 4, 8)
    gm = fuse_elementwise(fxkit.symbolic_trace(model), min_size=1)
    groups = sorted(body_ops(c.target) for c in fused_calls(gm))
    assert groups == ([["add"], ["mul"]] if training else [["mul", "add"]])
    fxkit.manual_seed(3)
    expected = model(x)
    fxkit.manual_seed(3)
    assert_same(gm(x), expected)


def test_second_run_changes_nothing_and_names_stay_unique(rng):
    gm = fuse_elementwise(fxkit.symbolic_trace(chain))
    before = str(gm.graph)
    assert str(fuse_elementwise(gm).graph) == before
    # New elementwise ops after a fused call form fused_1.
    graph = gm.graph
    out = graph.output_node()
    with graph.inserting_before(out):
        tail = graph.call(ops.sigmoid, (graph.call(ops.neg, (out.args[0],)),))
    out.args = (tail,)
    gm = fuse_elementwise(gm)
    assert [c.target.name for c in fused_calls(gm)] == ["fused_0", "fused_1"]
    x = fxkit.from_numpy(rng.uniform(0.999, 1.001, size=(4,)).astype(np.float32))
    assert_same(gm(x), ops.sigmoid(ops.neg(chain(x))))


def test_min_size_is_validated():
    with pytest.raises(ValueError, match=r"FuseElementwise: min_size must be an int >= 1, got 0"):
        FuseElementwise(min_size=0)


def test_malformed_input_graph_is_named():
    gm = fxkit.symbolic_trace(chain)
    first, second = gm.graph.find_nodes(op="call")[:2]
    first.args = (second, second)         # use before definition
    with pytest.raises(GraphError, match=r"(?s)FuseElementwise: the input graph is malformed.*%mul uses %mul_1"):
        fuse_elementwise(gm)


# -- FusedOp as a call target -------------------------------------------------------------------
def test_fused_module_copies_pickles_and_retraces(rng):
    model, inputs = zoo_model("lstm_cell")
    expected = model(*inputs)
    gm = fuse_elementwise(fxkit.symbolic_trace(model))
    for other in (copy.deepcopy(gm), pickle.loads(pickle.dumps(gm)), Transformer(gm).transform()):
        assert str(other.graph) == str(gm.graph)
        assert_same(other(*inputs), expected)
    retraced = fxkit.symbolic_trace(gm)   # the fused call is recorded as one node again
    assert [body_ops(c.target) for c in fused_calls(retraced)] == [body_ops(c.target) for c in fused_calls(gm)]
    assert_same(retraced(*inputs), expected)


def test_fused_op_shape_rule_matches_its_results(rng):
    def f(x, y):
        a = (x * y).tanh()
        return a, (a > 0).logical_not()

    x, y = randn(rng, 3, 1), randn(rng, 4)
    gm = fuse_elementwise(fxkit.symbolic_trace(f))
    fused = fused_calls(gm)[0].target
    metas = fused.shape_rule(TensorMeta((3, 1), fxkit.float32, x.device), TensorMeta((4,), fxkit.float32, y.device))
    results = fused(x, y)
    assert [(m.shape, m.dtype) for m in metas] == [(tuple(r.shape), r.dtype) for r in results]
    assert [m.dtype for m in metas] == [fxkit.float32, fxkit.bool]


def test_shapes_of_fused_graphs_by_running_and_by_rules_agree():
    model, inputs = zoo_model("lstm_cell")
    gm = fxkit.symbolic_trace(model)
    ShapeProp(gm).propagate(*inputs)      # before fusion: the bodies keep their members' shapes
    gm = fuse_elementwise(gm)
    text = str(gm.graph)
    assert "%fused_0_out : (f32[2, 256], f32[2, 256])" in text
    assert "%add_1     : f32[2, 256] = call[add](%mul, %mul_1)" in text.split("with fused_0")[1]
    ran = {n.name: (n.meta["shape"], n.meta["dtype"]) for n in gm.graph.nodes if "shape" in n.meta}
    infer_shapes(gm, *[tuple(x.shape) for x in inputs])
    inferred = {n.name: (n.meta["shape"], n.meta["dtype"]) for n in gm.graph.nodes if "shape" in n.meta}
    assert inferred == ran and "fused_0_out" in ran


def test_symbolic_shapes_and_cost_see_through_fused_ops():
    model, inputs = zoo_model("lstm_cell")
    specs = [("N", x.shape[1]) for x in inputs]
    unfused_flops = estimate_cost(fxkit.symbolic_trace(model), *specs).flops
    gm = fuse_elementwise(fxkit.symbolic_trace(model))
    assert estimate_cost(gm, *specs).flops == unfused_flops
    body = str(gm.graph).split("with fused_0")[1]
    assert "%mul_2     : f32[N, 256] = call[mul](%sigmoid_2, %tanh_1)" in body


def test_failure_inside_a_fused_op_names_the_body_node(rng):
    def f(x, y):
        return (x + y).relu()

    gm = fuse_elementwise(fxkit.symbolic_trace(f))
    with pytest.raises(ShapeError) as info:
        gm(randn(rng, 3), randn(rng, 4))
    message = str(info.value)
    assert "node: %add = call[add](%x, %y)" in message
    assert "test_fuse_elementwise.py" in message and "return (x + y).relu()" in message


# -- random programs ---------------------------------------------------------------------------
def _check_fused(program, min_size):
    # NOTE: shapes and dtypes first: ops with eager integer checks (div, pow, ...) fuse only once
    # their result is known to be floating point (Op.kernel_template).
    gm = program.graph_module()
    ShapeProp(gm).run(*program.inputs)
    gm = fuse_elementwise(gm, min_size=min_size)
    gm.graph.lint()
    assert_same(gm(*program.inputs), program.expected, "GraphModule")
    assert_same(Interpreter(gm).run(*program.inputs), program.expected, "Interpreter")
    return gm


@pytest.mark.slow
@RANDOM
@given(dags(max_steps=16))
def test_random_dags_keep_outputs_and_fuse_every_elementwise_op(program):
    gm = _check_fused(program, min_size=1)
    for node in gm.graph.nodes:
        assert not (isinstance(node.target, fxkit.runtime.op.Op) and node.target.kind == "elementwise"), \
            f"{node.format_node()} was left unfused\n{gm.graph}"
    for call in fused_calls(gm):
        call.target.graph.lint()


@pytest.mark.slow
@RANDOM
@given(chains(max_steps=16))
def test_random_chains_keep_outputs(program):
    _check_fused(program, min_size=2)


@pytest.mark.slow
@RANDOM
@given(dags(kinds=("elementwise",), max_steps=16))
def test_elementwise_only_programs_fuse_each_component_into_one_group(program):
    graph = program.graph()
    parent = {n: n for n in graph.nodes if n.op == "call"}

    def root(n):
        while parent[n] is not n:
            n = parent[n]
        return n

    for node in parent:
        for used in node.all_input_nodes:
            if used in parent:
                parent[root(used)] = root(node)
    components = {root(n) for n in parent}
    gm = _check_fused(program, min_size=1)
    assert len(fused_calls(gm)) == len(components)


@pytest.mark.parametrize("op", [ops.floor_divide, ops.remainder, ops.pow])
def test_integer_ops_eager_checks_stay_out_of_groups(op):
    # Eager mode raises on an integer zero divisor or negative power; a fused kernel could not.
    def f(a, b):
        return op(a + 1, b) * 2 - 1

    ints = fxkit.tensor([[4, 5], [6, 7]])
    gm = fxkit.symbolic_trace(f)
    ShapeProp(gm).run(ints, ints)
    fused = fuse_elementwise(gm, min_size=1)
    assert [n.target for n in fused.graph.nodes if n.op == "call" and not isinstance(n.target, FusedOp)] == [op]
    with pytest.raises(fxkit.FxkitError, match="division by zero|negative integer powers"):
        fused(ints, fxkit.tensor([[0, 1], [2, -1]]))
    floats = ints.float()
    gm = fxkit.symbolic_trace(f)
    ShapeProp(gm).run(floats, floats)
    assert [body_ops(n.target) for n in fused_calls(fuse_elementwise(gm))] == [["add", op.name, "mul", "sub"]]
