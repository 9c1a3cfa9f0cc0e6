"""`split_pipeline`: balanced stages (exactly optimal cuts), pipe_split() markers, the stage table."""
import io
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.errors import GraphError, ShapeError, TraceError
from fxkit.transforms import eliminate_dead_code
from fxkit.transforms.pipeline_cuts import balanced_cuts
from fxkit.transforms.split_pipeline import split_pipeline
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import zoo_model, zoo_params


def stage_names(parent):
    """The call node names of each stage's child, in order."""
    return [[n.name for n in parent.get_submodule(c.target).graph.find_nodes(op="call")]
            for c in parent.graph.find_nodes(op="call") if type(c.target) is str]


@pytest.mark.parametrize("name", zoo_params())
@pytest.mark.parametrize("k", [2, 3, 4])
def test_zoo_stages_equal_the_unsplit_model_exactly(name, k):
    model, inputs = zoo_model(name)
    parent = split_pipeline(model, inputs, n_stages=k, verbose=False)
    parent.graph.lint()
    assert len(parent.stage_stats) == k
    assert_same(parent(*inputs), model(*inputs), f"{name} in {k} stages")


@pytest.mark.parametrize("balance", ["params", "time"])
def test_other_balances_keep_outputs(balance):
    model, inputs = zoo_model("lenet")
    parent = split_pipeline(model, inputs, n_stages=3, balance=balance, verbose=False)
    assert_same(parent(*inputs), model(*inputs))
    stats = parent.stage_stats
    assert (stats[0].seconds is not None) == (balance == "time")
    assert sum(s.param_bytes for s in stats) == sum(p.nbytes() for p in model.parameters())


@pytest.mark.slow
def test_resnet50_at_224_splits_into_four_stages_within_15_percent_of_the_mean_flops():
    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet50")
    out = io.StringIO()
    parent = split_pipeline(model, [(8, 3, 224, 224)], n_stages=4, console=Console(file=out, width=120))
    flops = [s.flops for s in parent.stage_stats]
    ratio = max(flops) / (sum(flops) / 4)
    print(f"ResNet-50 224x224, 4 stages by FLOPs: max/mean = {ratio:.4f}")
    assert ratio <= 1.15
    assert sum(flops) == pytest.approx(2 * 8 * 4.11e9, rel=0.02)
    table = out.getvalue()
    assert "largest stage / mean flops" in table and f"{ratio:.3f}" in table
    for column in ("FLOPs", "param bytes", "sends", "first → last"):
        assert column in table


def test_params_balance_counts_every_parameter_once():
    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet18")
    parent = split_pipeline(model, [(1, 3, 64, 64)], n_stages=2, balance="params", verbose=False)
    stats = parent.stage_stats
    total = sum(p.nbytes() for p in model.parameters())
    assert sum(s.param_bytes for s in stats) == total
    assert max(s.param_bytes for s in stats) <= 0.75 * total  # fc and layer4 dominate; still balanced


def brute_force(costs, allowed, k):
    best = float("inf")
    for cuts in itertools.combinations(allowed, k - 1):
        bounds = [0, *cuts, len(costs)]
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


class _Meta:
    """A crossing value with a tensor: counted by balanced_cuts through its meta."""

    def __init__(self, nbytes):
        self.meta = {"tensor_meta": fxkit.runtime.meta.TensorMeta((nbytes,), fxkit.uint8)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=9), st.data())
def test_balanced_cuts_reach_the_brute_force_optimum(costs, data):
    n = len(costs)
    k = data.draw(st.integers(1, n))
    widths = data.draw(st.lists(st.integers(1, 3), min_size=n + 1, max_size=n + 1))
    crossing = [[_Meta(8)] * w for w in widths]
    cuts, limit = balanced_cuts(costs, crossing, k, max_crossing=2)
    allowed = [b for b in range(1, n) if widths[b] <= limit]
    assert len(cuts) == k - 1 and cuts == sorted(set(cuts)) and all(c in allowed for c in cuts)
    bounds = [0, *cuts, n]
    got = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
    assert got == brute_force(costs, allowed, k)


def test_among_optimal_cuts_the_fewest_bytes_cross():
    costs = [5, 0, 0, 5]
    crossing = [[], [_Meta(100)], [_Meta(10)], [_Meta(1000)], []]
    cuts, _ = balanced_cuts(costs, crossing, 2)
    assert cuts == [2]  # boundaries 1, 2 and 3 all give 5 | 5; boundary 2 sends 10 bytes


def test_too_few_cut_candidates_raise_the_crossing_limit():
    model, inputs = zoo_model("lstm_cell")
    out = io.StringIO()
    parent = split_pipeline(model, inputs, n_stages=4, max_crossing=0, console=Console(file=out, width=120))
    assert_same(parent(*inputs), model(*inputs))
    assert "cuts with at most 2 tensors crossing" in out.getvalue()


class Marked(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 4)

    def forward(self, x):
        x = self.a(x).relu()
        fxkit.pipe_split()
        x = self.b(x)
        fxkit.pipe_split()
        return self.c(x.tanh())


def test_pipe_split_is_recorded_kept_by_dead_code_elimination_and_a_no_op_eagerly():
    assert fxkit.pipe_split() is None
    model = Marked()
    gm = fxkit.symbolic_trace(model)
    markers = gm.graph.find_nodes(op="call", target=fxkit.ops.pipe_split)
    assert len(markers) == 2 and all(m.stack is not None for m in markers)
    gm = eliminate_dead_code(gm)
    assert len(gm.graph.find_nodes(op="call", target=fxkit.ops.pipe_split)) == 2
    assert "ops.pipe_split()" in gm.code
    x = fxkit.randn(2, 8)
    assert_same(gm(x), model(x))
    retraced = fxkit.symbolic_trace(gm)
    assert len(retraced.graph.find_nodes(op="call", target=fxkit.ops.pipe_split)) == 2


def test_markers_split_exactly_there():
    model = Marked()
    x = fxkit.randn(5, 8)
    parent = split_pipeline(model, [x], verbose=False)
    assert stage_names(parent) == [["a", "relu"], ["b"], ["tanh", "c"]]
    assert "pipe_split" not in str(parent.graph)
    assert_same(parent(x), model(x))
    assert split_pipeline(model, [x], n_stages=3, verbose=False).stage_stats[1].nodes == 1


def test_markers_and_a_different_stage_count_disagree():
    with pytest.raises(GraphError, match=r"2 pipe_split\(\) markers, i.e. 3 stages, but n_stages=2"):
        split_pipeline(Marked(), [(2, 8)], n_stages=2, verbose=False)


class EmptyStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        fxkit.pipe_split()
        return self.a(x)


def test_a_marker_leaving_an_empty_stage_is_refused_with_its_line():
    with pytest.raises(GraphError, match=r"leaves an empty stage\n  at .*test_split_pipeline.py:\d+ in forward: fxkit.pipe_split\(\)\n"
                       r"  node: %pipe_split = call\[pipe_split\]\(\)\n  hint: put at least one operation"):
        split_pipeline(EmptyStage(), [(2, 8)], verbose=False)


def test_pipe_split_takes_no_arguments():
    with pytest.raises(TraceError, match=r"pipe_split\(\) takes no arguments"):
        fxkit.pipe_split(fxkit.randn(2))


def test_bad_requests_are_explained():
    model, inputs = zoo_model("mlp")
    with pytest.raises(GraphError, match=r"balance='memory' is not one of flops, params, time"):
        split_pipeline(model, inputs, n_stages=2, balance="memory")
    with pytest.raises(GraphError, match=r"n_stages must be a positive number of stages, got None"):
        split_pipeline(model, inputs)
    with pytest.raises(GraphError, match=r"50 stages need at least 50 call nodes; the graph has \d+"):
        split_pipeline(model, inputs, n_stages=50, verbose=False)
    with pytest.raises(ShapeError, match=r"symbolic dimensions.*give concrete shapes"):
        split_pipeline(model, [("N", 784)], n_stages=2, verbose=False)


def test_a_graph_module_is_split_without_changing_it():
    model, inputs = zoo_model("digits_net")
    gm = fxkit.symbolic_trace(model)
    before = str(gm.graph)
    parent = split_pipeline(gm, inputs, n_stages=2, verbose=False)
    assert str(gm.graph) == before
    assert_same(parent(*inputs), gm(*inputs))


def test_stage_table_reports_the_sends_of_each_stage():
    model, inputs = zoo_model("mlp")
    parent = split_pipeline(model, inputs, n_stages=2, verbose=False)
    first, last = parent.stage_stats
    # What crosses is one activation of the batch: 2 samples of float32 features.
    crossing = parent.get_submodule("submod_1").graph.find_nodes(op="placeholder")
    assert first.sends == sum(int(np.prod(n.meta["shape"])) * 4 for n in crossing)
    assert last.sends == 2 * 10 * 4
    assert first.flops + last.flops > 0 and first.nodes + last.nodes == len(
        [n for n in fxkit.symbolic_trace(model).graph.nodes if n.op == "call"])
