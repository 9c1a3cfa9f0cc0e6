"""Pass and PassManager: order, lint after each pass, output checks naming the pass, the summary."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import GraphError, ShapeError
from fxkit.graph import Transformer
from fxkit.transforms import Pass, PassManager, pass_name
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params


def small(x):
    return (x.relu() * 2).neg()


def trace_small():
    return fxkit.symbolic_trace(small)


def random_input(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


class Scale(Pass):
    """Multiply the graph's output by ``factor`` (changes outputs on purpose).

    before:  return %neg
    after:   %mul_1 = call[mul](%neg, factor);  return %mul_1
    """

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, gm):
        out = gm.graph.output_node()
        result = out.args[0]
        with gm.graph.inserting_before(out):
            scaled = gm.graph.call(fxkit.ops.mul, (result, self.factor))
        out.args = (scaled,)
        return gm


class NearlyOne(Scale):
    """Scale by 1 + 1e-7: within its declared tolerance."""

    name = "nearly_one"
    rtol = 1e-6

    def __init__(self):
        super().__init__(1.0000001)


class Copy(Transformer):
    """Rebuild the graph unchanged."""


def use_before_def(gm):
    """Move %neg in front of %relu: %neg then reads %mul before it is computed."""
    nodes = list(gm.graph.nodes)
    relu, neg = nodes[1], nodes[3]
    relu.prepend(neg)
    return gm


def test_pass_name_defaults_to_class_name_and_repr_shows_options():
    assert Scale(3).name == "Scale"
    assert repr(Scale(3)) == "Scale(factor=3)"
    assert NearlyOne().name == "nearly_one"
    assert pass_name(use_before_def) == "use_before_def"
    assert pass_name(Copy) == "Copy"


def test_pass_base_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Pass()


def test_runs_passes_in_order_and_records_node_counts(rng):
    x = random_input(rng, 3, 4)
    pm = PassManager([Scale(2.0), Scale(3.0), Copy])
    gm = pm(trace_small())
    np.testing.assert_allclose(gm(x).numpy(), -np.maximum(x.numpy(), 0) * 2 * 2 * 3, rtol=1e-6)
    assert [(r.name, r.nodes_before, r.nodes_after) for r in pm.records] == \
        [("Scale", 5, 6), ("Scale", 6, 7), ("Copy", 7, 7)]
    assert all(r.seconds >= 0 for r in pm.records)


def test_use_before_def_is_stopped_naming_the_pass_and_the_node(rng):
    pm = PassManager([Copy, use_before_def], example_inputs=(random_input(rng, 3, 4),))
    with pytest.raises(GraphError) as info:
        pm(trace_small())
    message = str(info.value)
    assert "pass 'use_before_def' left a malformed graph" in message
    assert "%neg uses %mul before it is defined" in message
    assert "node: %neg = call[neg](%mul)" in message
    assert "hint:" in message


def test_lint_runs_without_example_inputs():
    with pytest.raises(GraphError, match="pass 'use_before_def' left a malformed graph"):
        PassManager([use_before_def])(trace_small())


def test_changed_outputs_name_the_pass(rng):
    pm = PassManager([Copy, Scale(1.5)], example_inputs=(random_input(rng, 3, 4),))
    with pytest.raises(GraphError) as info:
        pm(trace_small())
    message = str(info.value)
    assert "pass 'Scale' changed the outputs: output differs by up to" in message
    assert "exactly" in message and "rtol/atol" in message


def test_per_pass_tolerance_allows_small_changes(rng):
    x = random_input(rng, 3, 4)
    gm = PassManager([NearlyOne()], example_inputs=(x,))(trace_small())
    np.testing.assert_allclose(gm(x).numpy(), -np.maximum(x.numpy(), 0) * 2, rtol=1e-6)


def test_outputs_compared_with_the_previous_step(rng):
    # Scale changes outputs on purpose, so a check against the first step would fail the next pass;
    # with tolerance on the scaling pass, the Copy after it compares with the scaled outputs.
    class Loose(Scale):
        rtol = 1.0

    pm = PassManager([Loose(1.5), Copy], example_inputs=(random_input(rng, 3, 4),))
    pm(trace_small())
    assert [r.name for r in pm.records] == ["Loose", "Copy"]


def test_pass_returning_none_is_an_error():
    def forgets_return(gm):
        gm.graph.eliminate_dead_code()

    with pytest.raises(GraphError, match=r"pass 'forgets_return' returned NoneType, not a GraphModule.*return gm"):
        PassManager([forgets_return])(trace_small())


def test_error_raised_inside_a_pass_names_it():
    def refuses(gm):
        raise ShapeError("matmul: shapes cannot be multiplied (2x3 and 4x5)")

    with pytest.raises(ShapeError, match=r"in pass 'refuses': matmul: shapes cannot be multiplied \(2x3 and 4x5\)"):
        PassManager([refuses])(trace_small())


def test_bug_inside_a_pass_names_it():
    def buggy(gm):
        return gm.no_such_attribute

    with pytest.raises(GraphError, match=r"in pass 'buggy': AttributeError: .*no_such_attribute") as info:
        PassManager([buggy])(trace_small())
    assert isinstance(info.value.__cause__, AttributeError)


def test_pass_that_breaks_running_names_the_pass(rng):
    def wrong_arity(gm):
        for node in gm.graph.find_nodes(op="call", target=fxkit.ops.neg):
            node.target = fxkit.ops.matmul
            node.args = (node.args[0], node.args[0])
        return gm

    pm = PassManager([wrong_arity], example_inputs=(random_input(rng, 3, 4),))
    with pytest.raises(GraphError, match=r"the module after pass 'wrong_arity' fails on the example inputs"):
        pm(trace_small())


def test_rejects_a_plain_module():
    with pytest.raises(GraphError, match="expected a GraphModule, got Linear; trace the model first"):
        PassManager([Copy])(fxkit.nn.Linear(2, 3))


def test_summary_table(capsys, rng):
    pm = PassManager([Scale(2.0), Copy], verbose=True)
    pm(trace_small())
    shown = capsys.readouterr().out
    for text in ("PassManager", "pass", "nodes before", "nodes after", "time (ms)", "Scale", "Copy", "total", "+1"):
        assert text in shown
    records = pm.summary()
    assert capsys.readouterr().out == shown
    assert [r.name for r in records] == ["Scale", "Copy"]


@pytest.mark.parametrize("name", zoo_params())
def test_pass_manager_keeps_every_zoo_model_equal(name):
    model, inputs = zoo_model(name)
    pm = PassManager([Copy, Copy], example_inputs=inputs)
    _, transformed = check_model_paths(model, inputs, passes=[pm])
    assert [r.name for r in pm.records] == ["Copy", "Copy"]
    assert "PassManager" in transformed
