"""The LeNet-style MNIST ``Net`` of the seed talks and PyTorch's MNIST example."""
from fxkit import nn
from fxkit.nn import functional as F


class Net(nn.Module):
    """Two conv layers and two linear layers for 1x28x28 digits, returning log-probabilities.

    Example:
        >>> Net().eval()(fxkit.randn(64, 1, 28, 28)).shape
        (64, 10)
    """

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)
