"""Dotted attribute paths: reading them (errors name the missing part) and writing them."""
import pytest

import fxkit
from fxkit import nn
from fxkit.graph import assign_attr, fetch_attr


def test_fetch_attr_names_the_missing_part():
    model = nn.Sequential(nn.Linear(3, 4))
    assert fetch_attr(model, "0.weight") is model[0].weight
    with pytest.raises(AttributeError, match=r"^0 has no attribute 'scale' \(needed for '0.scale.x'\)$"):
        fetch_attr(model, "0.scale.x")
    with pytest.raises(AttributeError, match=r"^the module has no attribute 'fc'"):
        fetch_attr(model, "fc")


def test_assign_attr_registers_by_kind_and_creates_parents():
    root = nn.Module()
    linear, weight, table = nn.Linear(2, 2), nn.Parameter(fxkit.rand(3)), fxkit.rand(4)
    assign_attr(root, "a.b.linear", linear)
    assign_attr(root, "a.weight", weight)
    assign_attr(root, "a.b.table", table)
    assign_attr(root, "a.b.scratch", fxkit.rand(2), persistent=False)
    assign_attr(root, "a.flag", True)
    assert type(root.a) is nn.Module and root.get_submodule("a.b.linear") is linear
    assert dict(root.named_parameters())["a.weight"] is weight
    assert "a.b.table" in root.state_dict() and "a.b.scratch" not in root.state_dict()
    assert fetch_attr(root, "a.b.scratch").shape == (2,) and root.a.flag is True
