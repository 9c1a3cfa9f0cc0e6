"""Interoperability: ONNX export and import, PyTorch models and weights in.

``fxkit.onnx.export`` writes ONNX (`fxkit.interop.onnx_export`, imported on
first use), `from_onnx` reads ONNX back into a `GraphModule`, `from_torch`
converts a PyTorch module and `load_torch_state_dict` loads PyTorch weights
into a matching fxkit model. ``import fxkit`` imports neither onnx nor torch:
each is imported inside the function that needs it.
"""
from fxkit.interop.onnx_import import from_onnx
from fxkit.interop.torch_import import from_torch
from fxkit.interop.torch_layers import load_torch_state_dict
from fxkit.interop import onnxruntime_delegate  # noqa: F401,E402  (registers the "onnxruntime" backend)

__all__ = ["from_onnx", "from_torch", "load_torch_state_dict"]
