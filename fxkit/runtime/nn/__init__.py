"""``fxkit.nn``: Module, Parameter, the built-in layers, ``functional`` and ``init``.

Layers follow ``torch.nn``: the same constructor arguments and defaults, the
same parameter names, shapes and initialisation, so a PyTorch state_dict
converted to numpy loads unchanged and gives the same outputs.
"""
from fxkit.runtime.nn import functional, init
from fxkit.runtime.nn.activation import (GELU, Hardsigmoid, Hardswish, LogSoftmax, Mish, ReLU, ReLU6, Sigmoid, SiLU,
                                         Softmax, Tanh)
from fxkit.runtime.nn.attention import MultiheadAttention
from fxkit.runtime.nn.container import ModuleDict, ModuleList, Sequential
from fxkit.runtime.nn.conv import Conv2d, Conv3d
from fxkit.runtime.nn.data_parallel import DataParallel
from fxkit.runtime.nn.dropout import Dropout, Dropout2d
from fxkit.runtime.nn.embedding import Embedding
from fxkit.runtime.nn.flatten import Flatten
from fxkit.runtime.nn.linear import Identity, Linear, NonDynamicallyQuantizableLinear
from fxkit.runtime.nn.module import IncompatibleKeys, Module
from fxkit.runtime.nn.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d, InstanceNorm2d,
                                            LayerNorm, RMSNorm)
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.nn.pooling import (AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool2d, AvgPool2d, AvgPool3d,
                                      MaxPool2d, MaxPool3d)
from fxkit.runtime.nn.rnn import GRU, LSTM

__all__ = ["functional", "init", "Module", "Parameter", "IncompatibleKeys", "Linear", "Identity",
           "NonDynamicallyQuantizableLinear", "Conv2d", "Conv3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
           "RMSNorm", "InstanceNorm1d", "InstanceNorm2d", "Embedding",
           "ReLU", "ReLU6", "Hardsigmoid", "Hardswish", "Mish", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax",
           "LogSoftmax", "MaxPool2d", "AvgPool2d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
           "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Dropout", "Dropout2d", "Flatten", "Sequential", "ModuleList", "ModuleDict",
           "MultiheadAttention", "LSTM", "GRU", "DataParallel"]
