"""Port of pytorch/pytorch test/fx/test_pass_infra.py (class TestPassManager) to fxkit.

Translated: ``torch.fx.passes.infra.pass_manager.PassManager`` -> ``fxkit.transforms.PassManager``
(``add_checks``, ``add_constraint``, ``validate_constraints``, ``steps``), ``call_function``
nodes -> ``call`` nodes of registry ops. Deviation (DESIGN.md: a pass is GraphModule ->
GraphModule): the passes return the module they edit, where torch.fx's may return None.
"""
import pytest

import fxkit
from fxkit import nn, ops
from fxkit.errors import GraphError, PassError
from fxkit.transforms import PassManager, this_before_that_pass_constraint


def replace_add_with_mul_pass(gm):
    for node in gm.graph.nodes:
        if node.op == "call" and node.target is ops.add:
            node.target = ops.mul
    return gm


def replace_mul_with_sub_pass(gm):
    for node in gm.graph.nodes:
        if node.op == "call" and node.target is ops.mul:
            node.target = ops.div
    return gm


class AddModule(nn.Module):
    def forward(self, x):
        y = fxkit.add(x, x)
        z = fxkit.add(y, x)
        return z


# test/fx/test_pass_infra.py::TestPassManager::test_pass_manager
def test_pass_manager():
    traced_m = fxkit.symbolic_trace(AddModule())
    pm = PassManager(passes=[replace_add_with_mul_pass, replace_mul_with_sub_pass], steps=5)
    pm.validate_constraints()
    assert len(pm.passes) == 2
    pm(traced_m)
    for node in traced_m.graph.nodes:
        if node.op == "call":
            assert node.target is ops.div


# test/fx/test_pass_infra.py::TestPassManager::test_this_before_that_pass_constraint
def test_this_before_that_pass_constraint():
    passes = [lambda x: 2 * x for _ in range(10)]
    pm = PassManager(passes)
    pm.add_constraint(this_before_that_pass_constraint(passes[-1], passes[0]))
    with pytest.raises(RuntimeError):  # fxkit's GraphError is a RuntimeError
        pm.validate_constraints()
    with pytest.raises(GraphError, match="which a constraint forbids"):
        pm.validate_constraints()


# test/fx/test_pass_infra.py::TestPassManager::test_pass_manager_checks
def test_pass_manager_checks():
    traced_m = fxkit.symbolic_trace(AddModule())
    pm = PassManager(passes=[replace_add_with_mul_pass, replace_mul_with_sub_pass])

    def check_div_target(graph_module):
        for node in graph_module.graph.nodes:
            if node.op == "call" and node.target is not ops.div:
                raise ValueError("Target should be div!")

    pm.add_checks(check_div_target)
    with pytest.raises(ValueError):
        pm(traced_m)


# test/fx/test_pass_infra.py::TestPassManager::test_pass_manager_bad_checks
def test_pass_manager_bad_checks():
    def check_bad_args(graph_module, i):
        pass

    pm = PassManager()
    with pytest.raises(TypeError):  # fxkit's PassError is a TypeError
        pm.add_checks(check_bad_args)
    with pytest.raises(PassError):
        pm.add_checks(check_bad_args)
