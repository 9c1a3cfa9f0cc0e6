"""`DigitsNet`: the seed talks' LeNet-style ``Net`` adapted to 8x8 digits
(scikit-learn's ``load_digits``), small enough to train in seconds on a CPU.

Padded 3x3 convolutions keep the 8x8 and 4x4 maps whole, so two 2x2 poolings
leave 20 channels of 2x2 for the classifier, where LeNet's 5x5 unpadded
convolutions on 28x28 MNIST leave 20 channels of 4x4.
"""
from fxkit import nn
from fxkit.nn import functional as F


class DigitsNet(nn.Module):
    """Two padded conv layers and two linear layers for 1x8x8 digits, returning log-probabilities.

    Args:
        num_classes: number of outputs.
        dropout: dropout probability before the last layer (training mode only).

    Example:
        >>> DigitsNet().eval()(fxkit.randn(64, 1, 8, 8)).shape
        (64, 10)
    """

    def __init__(self, num_classes=10, dropout=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(20 * 2 * 2, 50)
        self.fc2 = nn.Linear(50, num_classes)
        self.dropout = dropout

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 20 * 2 * 2)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)
