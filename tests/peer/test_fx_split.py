"""Port of pytorch/pytorch test/fx/test_fx_split.py (TestFXSplit, TestSplitByTags) to fxkit.

``node.tag`` is fxkit's property over ``node.meta["tag"]``; ``split_by_tags`` is
``fxkit.transforms.split_by_tags``. Skipped (1): TestSplitOutputType::test_split_by_tags (its graph
comes from ``torch.export``: ATen graphs).
"""
from collections import defaultdict

import fxkit
from fxkit import nn
from fxkit.transforms import split_by_tags


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
