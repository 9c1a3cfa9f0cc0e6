"""replace_pattern and SubgraphMatcher, on cases modelled on torch.fx's test_subgraph_rewriter.py.

Each rewritten module is compared with a ``comparison`` function written the
way the rewrite should read, run eagerly (same ops in the same order, so the
outputs are bit-identical), and with float64 numpy where the math is short.
"""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.errors import GraphError
from fxkit.transforms import Match, SubgraphMatcher, replace_pattern
from tests.tracer.paths import assert_same


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def rewrite(fn, pattern, replacement):
    gm = fxkit.symbolic_trace(fn)
    matches = replace_pattern(gm, pattern, replacement)
    gm.graph.lint()
    return gm, matches


def targets(gm):
    return [n.target.name if isinstance(n.target, fxkit.runtime.op.Op) else n.target
            for n in gm.graph.nodes if n.op == "call"]


def test_replacing_a_pattern_with_itself_keeps_the_logic(rng):
    def f(x):
        val = ops.neg(x) + ops.relu(x)
        return ops.add(val, val)

    def pattern(x):
        return ops.neg(x) + ops.relu(x)

    x = randn(rng, 1, 3)
    gm, matches = rewrite(f, pattern, pattern)
    assert len(matches) == 1
    assert_same(gm(x), f(x))


def test_one_line_pattern_and_numpy_reference(rng):
    def f(x):
        val = ops.neg(x)
        return ops.add(val, val)

    gm, matches = rewrite(f, lambda x: ops.neg(x), lambda x: ops.relu(x))
    assert len(matches) == 1 and targets(gm) == ["relu", "add"]
    x = randn(rng, 2, 3)
    a = x.numpy().astype(np.float64)
    np.testing.assert_allclose(gm(x).numpy(), 2 * np.maximum(a, 0), rtol=1e-6)


def test_a_pattern_used_twice_is_replaced_twice(rng):
    def f(x, w1, w2):
        m1 = ops.cat([w1, w2]).sum()
        m2 = ops.cat([w1, w2]).sum()
        return x + ops.amax(m1) + ops.amax(m2)

    def pattern(w1, w2):
        return ops.cat([w1, w2]).sum()

    def replacement(w1, w2):
        return ops.stack([w1, w2])

    def comparison(x, w1, w2):
        m1 = ops.stack([w1, w2])
        m2 = ops.stack([w1, w2])
        return x + ops.amax(m1) + ops.amax(m2)

    gm, matches = rewrite(f, pattern, replacement)
    assert len(matches) == 2
    assert targets(gm).count("stack") == 2 and "cat" not in targets(gm)
    inputs = [randn(rng, 1, 3) for _ in range(3)]
    assert_same(gm(*inputs), comparison(*inputs))
    assert all(isinstance(m, Match) and m.replacements for m in matches)


def test_argument_order_is_kept(rng):
    def f(x, y):
        return ops.matmul(x, y) - y.sum()

    def pattern(x, y):
        return ops.matmul(x, y)

    def replacement(a, b):
        return ops.matmul(a, b) * 2

    gm, _ = rewrite(f, pattern, replacement)
    x, y = randn(rng, 3, 4), randn(rng, 4, 5)
    expected = 2 * (x.numpy().astype(np.float64) @ y.numpy()) - y.numpy().sum()
    np.testing.assert_allclose(gm(x, y).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_only_the_matched_value_is_replaced(rng):
    def f(x, y):
        val = ops.neg(y) + ops.relu(x)
        return ops.add(val, val)

    def comparison(x, y):
        val = ops.neg(y) + ops.neg(x)
        return ops.add(val, val)

    gm, _ = rewrite(f, lambda x: ops.relu(x), lambda x: ops.neg(x))
    x, y = randn(rng, 4, 4), randn(rng, 4, 4)
    assert_same(gm(x, y), comparison(x, y))


def test_pattern_is_the_entire_graph(rng):
    def f(x):
        a = ops.neg(x)
        return ops.add(a, a)

    def replacement(x):
        a = ops.sigmoid(x)
        return ops.cat([a, a])

    gm, _ = rewrite(f, f, replacement)
    x = randn(rng, 3, 4)
    assert_same(gm(x), replacement(x))


def test_returned_node_may_have_users_outside_the_match(rng):
    def f(x):
        y = ops.relu(x)
        return ops.neg(y) - y

    def comparison(x):
        y = ops.sigmoid(x)
        return ops.neg(y) - y

    gm, matches = rewrite(f, lambda x: ops.relu(x), lambda x: ops.sigmoid(x))
    assert len(matches) == 1
    x = randn(rng, 3, 4)
    assert_same(gm(x), comparison(x))


def test_internal_node_used_outside_the_match_is_not_a_match():
    def f(x, w1, w2, b1, b2):
        m1 = ops.cat([w1, w2])
        m2 = ops.cat([x, b2])
        t1 = m1.sum(1)                       # m1 is also read here: outside the pattern
        t2 = ops.matmul(m1, m2.t()) + b1
        return t1.sum(), t2.sum()

    def pattern(x, w1, w2, b1, b2):
        m1 = ops.cat([w1, w2])
        m2 = ops.cat([x, b2])
        return ops.matmul(m1, m2.t()) + b1

    def replacement(x, w1, w2, b1, b2):
        return ops.cat([x, w1, w2])

    gm, matches = rewrite(f, pattern, replacement)
    assert matches == []
    assert "matmul" in targets(gm)
    assert SubgraphMatcher(pattern).match(gm.graph) == []


def test_placeholder_matches_a_node_with_other_inputs(rng):
    def f(x):
        x = x + 3
        x = x.exp()
        x = ops.sigmoid(x)
        return x.to(fxkit.float64)

    def pattern(x):
        x = x.exp()
        x = ops.sigmoid(x)
        return x.to(fxkit.float64)

    gm, matches = rewrite(f, pattern, lambda x: x)
    assert len(matches) == 1 and targets(gm) == ["add"]
    x = randn(rng, 3, 4)
    assert_same(gm(x), x + 3)


def test_consecutive_matches_are_all_replaced(rng):
    def f(x):
        x = ops.sigmoid(x)
        x = ops.sigmoid(x)
        return ops.sigmoid(x)

    def comparison(x):
        return ops.tanh(ops.tanh(ops.tanh(x)))

    gm, matches = rewrite(f, lambda x: ops.sigmoid(x), lambda x: ops.tanh(x))
    assert len(matches) == 3
    x = randn(rng, 3, 4)
    assert_same(gm(x), comparison(x))


def test_overlapping_candidates_are_replaced_once_each(rng):
    def f(x):
        x = ops.sigmoid(x)
        x = ops.sigmoid(x)
        x = ops.sigmoid(x)
        return ops.sigmoid(x)

    def pattern(x):
        return ops.sigmoid(ops.sigmoid(x))

    def comparison(x):
        return ops.neg(ops.neg(x))

    gm0 = fxkit.symbolic_trace(f)
    # Three candidates (s1-s2, s2-s3, s3-s4); the middle one overlaps both others.
    assert len(SubgraphMatcher(pattern, remove_overlapping=False).match(gm0.graph)) == 3
    gm, matches = rewrite(f, pattern, lambda x: ops.neg(x))
    assert len(matches) == 2 and targets(gm) == ["neg", "neg"]
    x = randn(rng, 3, 4)
    assert_same(gm(x), comparison(x))


def test_multiple_outputs(rng):
    def f(x):
        y = ops.sigmoid(x)
        z = ops.relu(x)
        return y + z

    def pattern(a):
        return ops.sigmoid(a), ops.relu(a)

    def replacement(x):
        return ops.exp(x), ops.abs(x)

    def comparison(x):
        return ops.exp(x) + ops.abs(x)

    gm, matches = rewrite(f, pattern, replacement)
    assert len(matches) == 1 and len(matches[0].anchors) == 2
    x = randn(rng, 3, 4)
    assert_same(gm(x), comparison(x))


def test_duplicated_outputs(rng):
    def f(x1, x2):
        x = x1 - x2
        y = ops.sigmoid(x)
        z = ops.relu(x)
        return y + z

    def pattern(a1, a2):
        a = a1 - a2
        return ops.sigmoid(a), ops.relu(a), a

    def replacement(x1, x2):
        y1 = ops.exp(x1)
        y2 = ops.abs(x2)
        return y2, y2, y1

    def comparison(x1, x2):
        y2 = ops.abs(x2)
        return y2 + y2

    gm, _ = rewrite(f, pattern, replacement)
    x1, x2 = randn(rng, 3, 4), randn(rng, 3, 4)
    assert_same(gm(x1, x2), comparison(x1, x2))


def test_outputs_used_between_the_matched_nodes(rng):
    def f(x):
        a = ops.sigmoid(x)
        used = a * 2                       # reads the first output before the second is computed
        b = ops.relu(x)
        return used + b

    def pattern(x):
        return ops.sigmoid(x), ops.relu(x)

    def replacement(x):
        return ops.tanh(x), ops.abs(x)

    gm, matches = rewrite(f, pattern, replacement)
    assert len(matches) == 1
    x = randn(rng, 3, 4)
    assert_same(gm(x), ops.tanh(x) * 2 + ops.abs(x))


def test_unused_graph_arguments_stay(rng):
    def f(x, y, z):
        return x + y

    def comparison(x, y, z):
        return x - y

    gm, _ = rewrite(f, lambda x, y: x + y, lambda x, y: x - y)
    assert len(gm.graph.find_nodes(op="placeholder")) == 3
    inputs = [randn(rng, 3, 4) for _ in range(3)]
    assert_same(gm(*inputs), comparison(*inputs))


def test_kwargs_must_match_exactly(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w0 = nn.Parameter(fxkit.randn(8, 8))
            self.b0 = nn.Parameter(fxkit.randn(8))

        def forward(self, x):
            keyword = x * F.linear(x, self.w0, bias=self.b0)
            positional = x * F.linear(x, self.w0, self.b0)
            return keyword + positional

    def pattern(a, b, bias):
        return a * F.linear(a, b, bias=bias)

    def replacement(a, b, bias):
        return a * (ops.matmul(a, b.t()) + bias)

    model = M()
    gm = fxkit.symbolic_trace(model)
    matches = replace_pattern(gm, pattern, replacement)
    assert len(matches) == 1
    assert targets(gm).count("linear") == 1 and targets(gm).count("matmul") == 1
    x = randn(rng, 4, 8)
    xs, w, b = (t.numpy().astype(np.float64) for t in (x, model.w0, model.b0))
    np.testing.assert_allclose(gm(x).numpy(), 2 * xs * (xs @ w.T + b), rtol=1e-4, atol=1e-5)


def test_constants_must_match_exactly(rng):
    def f(x):
        return (x + 2) * (x + 3) * (x + 2.0)

    gm, matches = rewrite(f, lambda x: x + 2, lambda x: x - 2)
    assert len(matches) == 1
    x = randn(rng, 3)
    a = x.numpy().astype(np.float64)
    np.testing.assert_allclose(gm(x).numpy(), (a - 2) * (a + 3) * (a + 2), rtol=1e-5)


def test_a_placeholder_may_stand_for_a_constant(rng):
    def f(x, y):
        return ops.relu(x + 2) + ops.relu(x + y)

    def pattern(x, num):
        return ops.relu(x + num)

    def replacement(x, num):
        return x * num

    gm, matches = rewrite(f, pattern, replacement)
    assert [m.placeholder_nodes[1] for m in matches][0] == 2
    assert isinstance(matches[1].placeholder_nodes[1], fxkit.Node)
    x, y = randn(rng, 3), randn(rng, 3)
    assert_same(gm(x, y), x * 2 + x * y)


def test_a_placeholder_used_twice_binds_one_value(rng):
    def f(x, y):
        return x * x + x * y

    gm, matches = rewrite(f, lambda a: a * a, lambda a: a.pow(2))
    assert len(matches) == 1 and targets(gm) == ["pow", "mul", "add"]
    x, y = randn(rng, 3), randn(rng, 3)
    a, b = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
    np.testing.assert_allclose(gm(x, y).numpy(), a * a + a * b, rtol=1e-5, atol=1e-6)


def test_local_revert_of_a_failed_second_anchor(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            for i in range(5):
                setattr(self, f"w{i}", nn.Parameter(fxkit.randn(6, 6) * 0.3))
                setattr(self, f"b{i}", nn.Parameter(fxkit.randn(6)))

        def forward(self, in0, in1):
            lin_1 = F.linear(in1, self.w0, bias=self.b0)
            lin_2 = F.linear(lin_1, self.w1, bias=self.b1)
            sum_1 = in1 * lin_2 + in1                                # match 1
            lin_3 = F.linear(sum_1, self.w2, bias=self.b2)
            mul_2 = lin_3 * ops.sigmoid(lin_3)                       # not a match: lin_3 is not the right operand
            lin_5 = F.linear(F.linear(in0, self.w3, bias=self.b3), self.w4, bias=self.b4)
            sum_2 = in0 * lin_5 + in0                                # match 2
            return ops.cat([mul_2, sum_2], dim=1)

    def pattern(a, b, bias, c):
        lin = F.linear(a, b, bias=bias)
        return lin, c * lin

    def replacement(a, b, bias, c):
        lin = ops.matmul(a, b.t()) + bias
        return lin, lin * c

    model = M()
    gm = fxkit.symbolic_trace(model)
    inputs = (randn(rng, 2, 6), randn(rng, 2, 6))
    expected = model(*inputs)
    matches = replace_pattern(gm, pattern, replacement)
    # Five linears match the first anchor; only two of them complete the second (c * lin).
    assert len(matches) == 2
    assert targets(gm).count("linear") == 3 and targets(gm).count("matmul") == 2
    gm.graph.lint()
    np.testing.assert_allclose(gm(*inputs).numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_replacement_constants_are_copied_into_the_module(rng):
    def f(x):
        return ops.relu(x) + ops.relu(x * 2)

    scale = fxkit.tensor([0.5, 1.5, 2.5])

    def replacement(x):
        return x * scale

    gm, matches = rewrite(f, lambda x: ops.relu(x), replacement)
    assert len(matches) == 2
    attrs = gm.graph.find_nodes(op="get_attr")
    assert len({a.target for a in attrs}) == 1
    x = randn(rng, 3)
    a = x.numpy().astype(np.float64)
    s = np.array([0.5, 1.5, 2.5])
    np.testing.assert_allclose(gm(x).numpy(), a * s + a * 2 * s, rtol=1e-6)


def test_referenced_submodules_are_replaced(rng):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.sigmoid = nn.Sigmoid()
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.sigmoid(x + 1))

    class Pattern(M):
        def forward(self, x):
            return self.act(self.sigmoid(x))

    class Replacement(nn.Module):
        def __init__(self):
            super().__init__()
            self.tanh = nn.Tanh()

        def forward(self, x):
            return self.tanh(x).relu()

    gm = fxkit.symbolic_trace(M())
    (match,) = replace_pattern(gm, Pattern(), Replacement())
    gm.graph.lint()
    assert sorted(dict(gm.named_children())) == ["tanh"]
    assert isinstance(gm.tanh, nn.Tanh)
    x = randn(rng, 3, 4)
    np.testing.assert_allclose(gm(x).numpy(), np.maximum(np.tanh(x.numpy().astype(np.float64) + 1), 0), rtol=1e-6)


def test_new_nodes_keep_the_users_source_line_and_meta():
    def f(x):
        y = ops.relu(x)  # the line new nodes point at
        return y + 1

    gm = fxkit.symbolic_trace(f)
    relu = gm.graph.find_nodes(op="call", target=ops.relu)[0]
    relu.meta["note"] = "kept"
    (match,) = replace_pattern(gm, lambda x: ops.relu(x), lambda x: ops.sigmoid(x).neg())
    new = match.replacements
    assert [n.target for n in new] == [ops.sigmoid, ops.neg]
    assert all(n.stack is not None and "the line new nodes point at" in n.stack.line for n in new)
    assert new[-1].meta["note"] == "kept"


def test_matcher_reports_the_nodes_map():
    def f(x, y):
        return ops.relu(x * y) + ops.relu(y * 3)

    gm = fxkit.symbolic_trace(f)
    matches = SubgraphMatcher(lambda a, b: ops.relu(a * b)).match(gm.graph)
    assert len(matches) == 2
    first, second = matches
    assert first.anchor.target is ops.relu
    assert [p.name for p in first.nodes_map if p.op == "placeholder"] == ["a", "b"]
    assert [n.name for n in first.placeholder_nodes] == ["x", "y"]
    assert second.placeholder_nodes[0].name == "y" and second.placeholder_nodes[1] == 3


def test_mismatched_arguments_are_refused():
    gm = fxkit.symbolic_trace(lambda x: ops.relu(x))
    with pytest.raises(GraphError, match="pattern takes 1 arguments and the replacement 2"):
        replace_pattern(gm, lambda x: ops.relu(x), lambda x, y: x + y)
    with pytest.raises(GraphError, match="pattern returns 1 values and the replacement 2"):
        replace_pattern(gm, lambda x: ops.relu(x), lambda x: (x, x))
    with pytest.raises(GraphError, match="must return one or more computed nodes"):
        SubgraphMatcher(lambda x: x)
    with pytest.raises(GraphError, match="the pattern never uses its argument 'y'"):
        replace_pattern(gm, lambda x, y: ops.relu(x), lambda x, y: x + y)
