"""`DigitsNet` (the 8x8 digits variant of the seed talk's Net) against the same network in PyTorch."""
import numpy as np
import pytest

import fxkit
from fxkit import models

torch = pytest.importorskip("torch")

from tests.nn.torch_compare import assert_close, copy_state  # noqa: E402


class TorchDigitsNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.fc1 = torch.nn.Linear(256, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(torch.nn.functional.max_pool2d(self.conv1(x), 2))
        x = torch.relu(torch.nn.functional.max_pool2d(self.conv2(x), 2))
        x = torch.relu(self.fc1(x.view(-1, 256)))
        return torch.log_softmax(self.fc2(x), dim=1)


def test_digits_net_matches_torch(rng):
    reference = TorchDigitsNet().eval()
    model, shapes = models.get("digits_net")
    assert shapes == [(64, 1, 8, 8)]
    assert list(model.state_dict()) == list(reference.state_dict())
    copy_state(model, reference)
    x = rng.random((5, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x))
    assert_close(model(fxkit.from_numpy(x)), expected, 1e-5)


def test_digits_net_dropout_only_in_training(rng):
    model = models.DigitsNet()
    x = fxkit.from_numpy(rng.random((16, 1, 8, 8)).astype(np.float32))
    assert not np.allclose(model(x).numpy(), model(x).numpy())
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())


def test_digits_net_widths_are_arguments():
    model = models.DigitsNet(channels=(10, 20), hidden=50, num_classes=7)
    assert [tuple(p.shape) for p in model.parameters()] == [(10, 1, 3, 3), (10,), (20, 10, 3, 3), (20,), (50, 80),
                                                            (50,), (7, 50), (7,)]
    assert model.eval()(fxkit.randn(3, 1, 8, 8)).shape == (3, 7)
