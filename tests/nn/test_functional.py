"""fxkit.nn.functional names ARE the registry's ops, and the public aliases are one module."""
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn
from fxkit.nn import init
from fxkit.runtime.nn import functional as runtime_functional
from fxkit.runtime.nn import init as runtime_init
from fxkit.runtime.registry import get_op


@pytest.mark.parametrize("name", F.__all__)
def test_functional_names_are_registry_ops(name):
    assert getattr(F, name) is get_op(name)
    assert getattr(F, name) is getattr(fxkit.ops, name)


def test_functional_covers_torch_names():
    torch_functional = pytest.importorskip("torch.nn.functional")
    missing = [name for name in F.__all__ if not hasattr(torch_functional, name)]
    assert missing == []  # every name is one torch.nn.functional has too


def test_aliases_are_the_runtime_modules():
    assert F is runtime_functional and init is runtime_init
    assert fxkit.nn is nn and nn.Linear.__module__ == "fxkit.runtime.nn.linear"
    assert nn.functional is F and nn.init is init
    with pytest.raises(AttributeError, match="has no attribute 'conv_transpose3d'"):
        F.conv_transpose3d
