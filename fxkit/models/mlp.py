"""A multi-layer perceptron: Linear layers with ReLU between them."""
from fxkit import nn
from fxkit.nn import functional as F


class MLP(nn.Module):
    """``in_features -> hidden... -> out_features``, ReLU after every hidden layer.

    Inputs of more than two dimensions are flattened after the batch
    dimension, so MNIST images ``(N, 1, 28, 28)`` work as they are.

    Args:
        in_features: input size (784 for MNIST).
        hidden: sizes of the hidden layers.
        out_features: output size.

    Example:
        >>> MLP(784, (256, 128), 10)(fxkit.randn(64, 784)).shape
        (64, 10)
    """

    def __init__(self, in_features=784, hidden=(256, 128), out_features=10):
        super().__init__()
        sizes = [in_features, *hidden]
        self.in_features = in_features
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.head = nn.Linear(sizes[-1], out_features)

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)
