"""The corpus builds every model with outputs that mean something (finite, ordinary, input-dependent)."""
import pytest

from tests.corpus import FAST, NAMES, build, generality_vision, require_libraries

require_libraries()
import torch  # noqa: E402

from tests.corpus.entry import check_distinct  # noqa: E402

SLOW = [pytest.param(name, marks=pytest.mark.corpus) for name in NAMES + generality_vision.NAMES
        if name not in FAST + generality_vision.FAST]


@pytest.mark.parametrize("name", list(FAST + generality_vision.FAST) + SLOW)
def test_outputs_are_non_degenerate(name):
    entry = build(name)
    assert not entry.model.training
    check_distinct(entry)
    batch3 = entry(*entry.make_inputs(3, 0))
    assert batch3[0].shape[entry.batch_dims[0]] == 3


def test_degenerate_outputs_are_caught():
    class Constant(torch.nn.Module):
        def forward(self, x):
            return torch.ones(x.shape[0], 4)

    entry = build(FAST[0])
    constant = type(entry)("test/constant", Constant(), entry.make_inputs, (0,), ("x",))
    with pytest.raises(AssertionError, match="change by only"):
        check_distinct(constant)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="torchvision/resnet18"):
        build("torchvision/resnet19")


def test_torchvision_c_ops_fail_clearly_when_absent():
    from tests.corpus.torchvision_import import import_torchvision

    torchvision = import_torchvision()
    if torchvision.extension._has_ops():
        pytest.skip("torchvision's C extension loads here; no shim was needed")
    with pytest.raises(RuntimeError, match="C extension does not load"):
        torch.ops.torchvision.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
