"""Shared data and models of the quantization tests: scikit-learn's digits, split as
recipes/train_digits.py splits them (the last quarter, writers the models never saw, is the
test split), an MLP whose weights come from scikit-learn's MLPClassifier, and a DigitsNet
trained with fxkit autograd."""
import warnings

import numpy as np
import pytest

import fxkit
from fxkit.models import MLP, DigitsNet
from fxkit.nn import functional as F

sklearn = pytest.importorskip("sklearn")


class Digits:
    """The split as arrays: images in [0, 1] (N, 64), labels int64."""

    def __init__(self):
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = (digits.data / 16.0).astype(np.float32)
        labels = digits.target.astype(np.int64)
        cut = len(labels) - len(labels) // 4
        self.train_x, self.train_y = images[:cut], labels[:cut]
        self.test_x, self.test_y = images[cut:], labels[cut:]

    def batches(self, size=64, shape=(-1, 64)):
        """Calibration batches of training images (single tensors)."""
        return [fxkit.from_numpy(self.train_x[i:i + size].reshape(shape)) for i in range(0, len(self.train_x), size)]

    def accuracy(self, model, shape=(-1, 64)):
        """Test-split accuracy in percent."""
        with fxkit.no_grad():
            predicted = model(fxkit.from_numpy(self.test_x.reshape(shape))).argmax(dim=1).numpy()
        return 100.0 * float((predicted == self.test_y).mean())


@pytest.fixture(scope="session")
def digits():
    return Digits()


@pytest.fixture(scope="session")
def sklearn_mlp(digits):
    """An fxkit MLP 64-256-10 carrying the weights of an MLPClassifier trained on the digits."""
    from sklearn.neural_network import MLPClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 100 iterations stop before sklearn's tolerance
        clf = MLPClassifier(hidden_layer_sizes=(256,), max_iter=100, random_state=0).fit(digits.train_x,
                                                                                         digits.train_y)
    model = MLP(64, (256,), 10).eval()
    state = {"layers.0.weight": clf.coefs_[0].T, "layers.0.bias": clf.intercepts_[0],
             "head.weight": clf.coefs_[1].T, "head.bias": clf.intercepts_[1]}
    model.load_state_dict({k: fxkit.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in state.items()})
    np.testing.assert_allclose(digits.accuracy(model), 100 * clf.score(digits.test_x, digits.test_y))
    return model


@pytest.fixture(scope="session")
def digits_net(digits):
    """A DigitsNet trained for 8 epochs with SGD and momentum, as recipes/train_digits.py trains it
    (without its shifted-image augmentation and learning-rate decay, to keep the test short)."""
    fxkit.manual_seed(0)
    model = DigitsNet()
    optimizer = fxkit.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    images = digits.train_x.reshape(-1, 1, 8, 8)
    for _ in range(8):
        order = rng.permutation(len(images))
        for i in range(0, len(images), 32):
            batch = order[i:i + 32]
            loss = F.nll_loss(model(fxkit.from_numpy(images[batch])), fxkit.from_numpy(digits.train_y[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()
