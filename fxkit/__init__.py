"""fxkit: capture, transform and compile models written against fxkit.nn."""
import fxkit.runtime  # noqa: F401  (registers every op, installs Tensor methods)
from fxkit import ops
from fxkit.errors import (AutogradError, DeviceError, DTypeError, FxkitError, GraphError, IndexOutOfRangeError,
                          LoweringError, ResourceLimitError, ShapeError, SpecializationError, TraceError,
                          ValueRangeError)
from fxkit.ops import *  # noqa: F401,F403  (fxkit.<op name>)
import fxkit.nn as nn  # noqa: E402  (fxkit.nn, like torch.nn)
import fxkit.optim as optim  # noqa: E402  (fxkit.optim, like torch.optim)
import fxkit.utils as utils  # noqa: E402  (fxkit.utils.data, like torch.utils.data)
from fxkit import autograd  # noqa: E402  (fxkit.autograd, like torch.autograd)
from fxkit.runtime.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from fxkit.runtime.device import Device, cuda
from fxkit.runtime.device import Device as device
from fxkit.runtime.dtypes import (DType, bfloat16, bool_, float16, float32, float64, int8, int16, int32,
                                  int64, uint8)
from fxkit.runtime.ops.factories import from_numpy, manual_seed, tensor
from fxkit.runtime.quantized import QTensor, quantize_per_channel, quantize_per_tensor
from fxkit.runtime.tensor import Tensor

bool = bool_  # noqa: A001  (fxkit.bool, like torch.bool)
float = float32  # noqa: A001
half = float16
double = float64
long = int64
int = int32  # noqa: A001

__version__ = "0.1.0"

# The IR and the tracer sit above the runtime; the package top exports them (torch.fx's names).
from fxkit.graph import Graph, GraphModule, Interpreter, Node, Transformer  # noqa: E402
from fxkit.graph.draw import draw  # noqa: E402  (fxkit.draw(gm, "model.svg"))
from fxkit.tracer import Proxy, Tracer, load, save, symbolic_trace, wrap  # noqa: E402
from fxkit.tracer.assertion import _assert  # noqa: E402  (torch._assert)
from fxkit.backends import compile  # noqa: E402,A001  (fxkit.compile, like torch.compile)
from fxkit import distributed  # noqa: E402  (fxkit.distributed, like torch.distributed; mpi4py loads on first use)
from fxkit.interop import from_onnx, from_torch, load_torch_state_dict  # noqa: E402


def __getattr__(name):
    # NOTE: fxkit.onnx (ONNX export) is imported on first use, so `import fxkit` never loads onnx.
    if name == "onnx":
        import fxkit.interop.onnx_export as onnx_export

        return onnx_export
    raise AttributeError(f"module 'fxkit' has no attribute {name!r}")
