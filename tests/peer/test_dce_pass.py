"""Port of pytorch/pytorch test/fx/test_dce_pass.py (class TestDCE) to fxkit.

Translated: ``torch.fx`` -> fxkit (four opcodes: ``call`` for call_function/call_module),
``torch.tensor`` -> fxkit tensors, ``Graph.eliminate_dead_code(is_impure_node=...)`` as is.
Skipped (3): test_impure_kwargs (ATen's ``add.out`` overload: aten internals),
test_keep_collectives and test_keep_collectives_no_overload (``torch.distributed`` c10d ops).
"""
import copy

import fxkit
from fxkit import nn, ops
from tests.peer.helpers import assert_equal, tensor


def _custom_is_impure_node(node):
    if node.is_impure():
        return True
    return node.is_op(ops.add)  # the original marks aten.add impure


def _has_nodes_without_users(m, custom=False):
    for node in m.graph.nodes:
        if (not custom and node.is_impure()) or (custom and _custom_is_impure_node(node)):
            continue
        if len(node.users) == 0:
            return True
    return False


def _num_placeholders(m):
    return sum(1 for node in m.graph.nodes if node.op == "placeholder")


def _run_dce_and_test(m, expect_dce_changes, modules_to_be_leafs=None, custom=False):
    class TestTracer(fxkit.Tracer):
        def is_leaf_module(self, module, qualname):
            if modules_to_be_leafs and type(module) in modules_to_be_leafs:
                return True
            return super().is_leaf_module(module, qualname)

    traced = fxkit.GraphModule(m, TestTracer().trace(m))
    assert _has_nodes_without_users(traced, custom=custom) == expect_dce_changes
    orig_num_phs = _num_placeholders(traced)
    if custom:
        changed = traced.graph.eliminate_dead_code(is_impure_node=_custom_is_impure_node)
    else:
        changed = traced.graph.eliminate_dead_code()
    assert changed if expect_dce_changes else not changed
    assert not _has_nodes_without_users(traced, custom=custom)
    assert _num_placeholders(traced) == orig_num_phs
    traced.recompile()
    inputs = [tensor(1.5)] * orig_num_phs
    inputs_copy = copy.deepcopy(inputs)
    assert_equal(traced(*inputs_copy), m(*inputs))


# test/fx/test_dce_pass.py::TestDCE::test_simple
def test_simple():
    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.attr_1 = nn.Parameter(tensor(-0.9))

        def forward(self, x):
            a = x + 1  # noqa: F841
            return x + self.attr_1

    _run_dce_and_test(TestModule(), expect_dce_changes=True)


# test/fx/test_dce_pass.py::TestDCE::test_dead_chain
def test_dead_chain():
    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.attr_1 = nn.Parameter(tensor(-0.9))

        def forward(self, x):
            a = x + 1
            b = a * 7  # noqa: F841
            return x + self.attr_1

    _run_dce_and_test(TestModule(), expect_dce_changes=True)


# test/fx/test_dce_pass.py::TestDCE::test_dead_getattr
def test_dead_getattr():
    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.attr_1 = nn.Parameter(tensor(-0.9))

        def forward(self, x):
            a = x + 1
            b = a * self.attr_1  # noqa: F841
            return x + 11

    _run_dce_and_test(TestModule(), expect_dce_changes=True)


# test/fx/test_dce_pass.py::TestDCE::test_dead_placeholder
def test_dead_placeholder():
    class TestModule(nn.Module):
        def forward(self, x, y):
            return x + 7

    _run_dce_and_test(TestModule(), expect_dce_changes=False)


# test/fx/test_dce_pass.py::TestDCE::test_dead_placeholder_with_user
def test_dead_placeholder_with_user():
    class TestModule(nn.Module):
        def forward(self, x, y):
            a = y + 2  # noqa: F841
            return x + 7

    _run_dce_and_test(TestModule(), expect_dce_changes=True)


# test/fx/test_dce_pass.py::TestDCE::test_keep_module_with_side_effects
def test_keep_module_with_side_effects():
    class ReLUImpure(nn.ReLU):
        _is_impure = True

    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = ReLUImpure()

        def forward(self, a):
            r = self.relu(a)  # noqa: F841
            return a * 2

    _run_dce_and_test(TestModule(), expect_dce_changes=False, modules_to_be_leafs={ReLUImpure})


@fxkit.wrap(pure=False)
def _assert(condition, message):
    """fxkit's stand-in for ``torch._assert``: a function wrapped as impure."""
    if not condition:
        raise AssertionError(message)


# test/fx/test_dce_pass.py::TestDCE::test_keep_torch_assert
def test_keep_torch_assert():
    # fxkit has no torch._assert; a function wrapped with pure=False is what is known to have effects.
    class TestModule(nn.Module):
        def forward(self, a):
            _assert((a == a).all(), "a must equal a")
            return a * 2

    _run_dce_and_test(TestModule(), expect_dce_changes=False)


# test/fx/test_dce_pass.py::TestDCE::test_impure_nodes_args
def test_impure_nodes_args():
    # The original calls aten.add_ in place. fxkit records an in-place method on a traced value
    # functionally (the name is rebound to the new node), so the add is used by the mul: nothing is dead.
    class TestModule(nn.Module):
        def forward(self, a):
            a.add_(1)
            return a * 2

    m = TestModule()
    traced = fxkit.symbolic_trace(m)
    assert not _has_nodes_without_users(traced)
    assert not traced.graph.eliminate_dead_code()
    assert_equal(traced(tensor(1.5)), tensor((1.5 + 1) * 2))


# test/fx/test_dce_pass.py::TestDCE::test_impure_custom
def test_impure_custom():
    class TestModule(nn.Module):
        def forward(self, a):
            b = a + 1
            c = ops.add(b, b)  # noqa: F841
            return a

    _run_dce_and_test(TestModule(), expect_dce_changes=False, custom=True)
