"""Interoperability: ONNX export and import, PyTorch models and weights in.

``fxkit.onnx.export`` writes ONNX (the ``onnx`` package is imported only when
it is used), `from_onnx` reads it back into a `GraphModule`, `from_torch`
converts a PyTorch module and `load_torch_state_dict` loads PyTorch weights.
Neither onnx nor torch is imported by ``import fxkit``.
"""
