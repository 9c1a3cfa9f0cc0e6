"""Port of pytorch/pytorch test/fx/test_fx_split.py (TestFXSplit, TestSplitByTags, TestSplitOutputType).

``node.tag`` is fxkit's property over ``node.meta["tag"]``; ``split_by_tags`` is
``fxkit.transforms.split_by_tags``; torch.fx's ``_SplitterBase`` with an ``OperatorSupport`` is
``fxkit.transforms.partition_by_support`` with a predicate. TestSplitOutputType's graph comes from
``torch.export`` there; here from ``fxkit.symbolic_trace`` (and from ``fxkit.from_torch``, fxkit's
torch.export route, when torch is installed).
"""
import dataclasses
from collections import defaultdict

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.graph import Graph, GraphModule
from fxkit.transforms import partition_by_support, split_by_tags
from tests.peer.helpers import assert_equal, randn


@dataclasses.dataclass
class DummyDataClass:
    a: int
    b: int
    c: int


@fxkit.wrap
def make_dummy(a, b, c):
    return DummyDataClass(a, b, c)


@fxkit.wrap
def wrapped_add(_dataclass, y):
    return _dataclass.c + y


# test/fx/test_fx_split.py::TestFXSplit::test_split_preserve_node_meta
def test_split_preserve_node_meta():
    class TestModule(nn.Module):
        def forward(self, x, y):
            x = x + x
            y = y * y
            return x - y

    gm = fxkit.symbolic_trace(TestModule())
    for node in gm.graph.nodes:
        node.meta["name"] = node.name
        if node.name == "add":
            node.tag = "a"
        elif node.name == "mul":
            node.tag = "b"
        elif node.name == "sub":
            node.tag = "c"
    split_gm = split_by_tags(gm, ["a", "b", "c"])
    for m in split_gm.children():
        for n in m.graph.nodes:
            if n.op != "output":
                assert "name" in n.meta
                assert n.meta["name"] == n.name
    for node in split_gm.graph.nodes:
        if node.op == "placeholder":
            assert "name" in node.meta
            assert node.meta["name"] == node.name


class TaggedModule(nn.Module):  # TestSplitByTags.TestModule
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(2, 3)
        self.linear2 = nn.Linear(4, 5)
        self.linear3 = nn.Linear(6, 7)
        self.linear4 = nn.Linear(8, 6)

    def forward(self, x1, x2, x3):
        v1 = self.linear1(x1)
        v2 = self.linear2(x2)
        v3 = self.linear3(x3)
        v4 = fxkit.cat([v1, v2, v3])
        return self.linear4(v4)


def _is_call_module(node):
    return node.op == "call" and type(node.target) is str


def trace_and_tag(module, tags):
    tag_node = defaultdict(list)
    gm = fxkit.symbolic_trace(module)
    for node in gm.graph.nodes:
        if "linear1" in node.name:
            node.tag = tags[0]
            tag_node[tags[0]].append(node.name)
        elif "linear2" in node.name:
            node.tag = tags[1]
            tag_node[tags[1]].append(node.name)
        else:
            node.tag = tags[2]
            if _is_call_module(node):
                tag_node[tags[2]].append(node.name)
    return gm, tag_node


# test/fx/test_fx_split.py::TestSplitByTags::test_split_by_tags
def test_split_by_tags():
    tags = ["red", "blue", "green"]
    gm, tag_node = trace_and_tag(TaggedModule(), tags)
    split_gm, orig_to_split_fqn_mapping = split_by_tags(gm, tags, return_fqn_mapping=True)
    for idx, (name, _) in enumerate(split_gm.named_children()):
        if idx < len(tags):
            assert name == tags[idx], f"split_gm has an incorrect submodule named {name}"
    for sub_name, sub_graph_module in split_gm.named_children():
        node_idx = 0
        for node in sub_graph_module.graph.nodes:
            if not _is_call_module(node):
                continue
            assert node.name == tag_node[sub_name][node_idx], f"{sub_name} has incorrectly include {node.name}"
            node_idx += 1
    assert orig_to_split_fqn_mapping == {"linear1": "red.linear1", "linear2": "blue.linear2",
                                         "linear3": "green.linear3", "linear4": "green.linear4"}


# test/fx/test_fx_split.py::TestFXSplit::test_dataclass_as_graph_entry
def test_dataclass_as_graph_entry():
    class TestModuleWithFunctionEntry(nn.Module):
        def forward(self, y):
            dummy_data_class = DummyDataClass(2, 3, 4)
            return wrapped_add(dummy_data_class, y)

    mod = TestModuleWithFunctionEntry()
    gm = fxkit.symbolic_trace(mod)
    # As in torch.fx, the dataclass argument is rebuilt by a call node with no inputs (the case's point).
    entries = [n for n in gm.graph.nodes if n.op == "call" and n.target is DummyDataClass]
    assert len(entries) == 1 and not entries[0].all_input_nodes
    # The same shape of graph built by hand, with a wrapped factory in the dataclass's place.
    graph = Graph()
    y = graph.placeholder("y")
    entry = graph.call(make_dummy, (2, 3, 4))
    graph.output(graph.call(wrapped_add, (entry, y)))
    by_hand = GraphModule(nn.Module(), graph)
    test_input = randn(2, 3)
    for traced in (gm, by_hand):
        split_result = partition_by_support(traced, lambda node: node.target is wrapped_add)
        assert split_result is not None
        assert_equal(split_result(test_input), mod(test_input))


class ConvMulRelu(nn.Module):  # TestSplitOutputType.TestModule
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=1, bias=True)
        self.relu = nn.ReLU()

    def forward(self, x):
        conv = self.conv(x)
        conv = conv * 0.5
        return self.relu(conv)


def _tag_conv_mul_relu(gm, tags):
    for node in gm.graph.nodes:
        if "conv" in node.name:
            node.tag = tags[0]
        elif "mul" in node.name:
            node.tag = tags[1]
        else:
            node.tag = tags[2]
    return gm


# test/fx/test_fx_split.py::TestSplitOutputType::test_split_by_tags (a 32x32 input, not 224x224)
def test_split_output_type_split_by_tags():
    tags = ["red", "blue", "green"]
    module = ConvMulRelu()
    inputs = randn(1, 3, 32, 32)
    gm = _tag_conv_mul_relu(fxkit.symbolic_trace(module), tags)
    split_gm, _ = split_by_tags(gm, tags, return_fqn_mapping=True)
    gm_output = module(inputs)
    split_gm_output = split_gm(inputs)
    assert type(gm_output) is type(split_gm_output)
    assert_equal(split_gm_output, gm_output)


# The same case with the original's torch.export graph, through fxkit.from_torch.
def test_split_output_type_split_by_tags_from_torch_export():
    torch = pytest.importorskip("torch")

    class TorchModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, stride=1, bias=True)
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x) * 0.5)

    tags = ["red", "blue", "green"]
    module = TorchModule().eval()
    inputs = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    gm = _tag_conv_mul_relu(fxkit.from_torch(module, (torch.from_numpy(inputs),)), tags)
    split_gm, _ = split_by_tags(gm, tags, return_fqn_mapping=True)
    with torch.no_grad():
        expected = module(torch.from_numpy(inputs)).numpy()
    split_gm_output = split_gm(fxkit.tensor(inputs))
    assert type(split_gm_output) is fxkit.Tensor
    np.testing.assert_allclose(split_gm_output.numpy(), expected, rtol=1e-5, atol=1e-5)
