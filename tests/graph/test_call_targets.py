"""Registered call-target kinds: what lets fxkit.save store a FusedOp without importing it."""
import pytest

import fxkit
from fxkit import nn, ops
from fxkit.errors import GraphError
from fxkit.graph import Graph, called_graph, register_target_kind
from fxkit.graph.call_targets import kind_of, target_kind


class Scaled:
    """A call target that is data: multiply by ``k`` (a body-less kind)."""

    def __init__(self, k):
        self.k = k
        self.__name__ = f"scaled_{k}"

    def __call__(self, x):
        return x * self.k

    def to_data(self, save_graph):
        return {"k": self.k}

    @classmethod
    def from_data(cls, data, load_graph):
        return cls(data["k"])


class MoreScaled(Scaled):
    pass


def test_kinds_are_found_by_class_and_name():
    register_target_kind("test_scaled", Scaled)
    assert kind_of(Scaled(2)).cls is Scaled
    assert kind_of(MoreScaled(2)).name == "test_scaled"   # subclasses share their base's kind
    assert kind_of(ops.add) is None and kind_of(len) is None
    assert target_kind("test_scaled").cls is Scaled


def test_a_registered_kind_round_trips_through_save_and_load(rng, tmp_path):
    register_target_kind("test_scaled", Scaled)
    graph = Graph()
    x = graph.placeholder("x")
    graph.output(graph.call(Scaled(3.0), (x,)))
    fxkit.save(fxkit.GraphModule(nn.Module(), graph), tmp_path / "m")
    loaded = fxkit.load(tmp_path / "m")
    (call,) = loaded.graph.find_nodes(op="call")
    assert type(call.target) is Scaled and call.target.k == 3.0
    x = fxkit.from_numpy(rng.standard_normal(4).astype("float32"))
    assert (loaded(x).numpy() == (x * 3.0).numpy()).all()


def test_a_kind_needs_both_methods():
    class Plain:
        pass

    with pytest.raises(GraphError, match=r"Plain needs a to_data\(self, save_graph\) method and a "
                                         r"from_data\(cls, data, load_graph\) classmethod"):
        register_target_kind("test_plain", Plain)


def test_a_taken_name_is_refused_for_another_class():
    register_target_kind("test_scaled", Scaled)

    class Other(Scaled):
        pass

    with pytest.raises(GraphError, match=r"the name 'test_scaled' is taken by .*Scaled; register "
                                         r".*Other under another name"):
        register_target_kind("test_scaled", Other)


def test_unknown_kind_says_how_to_register():
    with pytest.raises(GraphError, match=r"unknown call-target kind 'nope' \(registered: .*\); the module defining "
                                         r"it registers it with fxkit.graph.register_target_kind when imported"):
        target_kind("nope")


def test_called_graph_is_the_body_of_fused_calls_only(rng):
    def f(x):
        return (x * x).tanh()

    gm = fxkit.transforms.fuse_elementwise(fxkit.symbolic_trace(f))
    fused = [n for n in gm.graph.nodes if n.op == "call"]
    assert [called_graph(n) is n.target.graph for n in fused] == [True]
    assert called_graph(gm.graph.find_nodes(op="placeholder")[0]) is None
