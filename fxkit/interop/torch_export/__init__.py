"""The torch.export route of `fxkit.from_torch`: capture, decompose, map each ATen op.

``import_program(torch, model, example_inputs, dynamic_shapes)`` captures
``model`` with ``torch.export`` (`capture`), lowers it toward core ATen while
keeping whole the composites fxkit has a registry op for, and rebuilds the
graph through the one table of ATen overloads (`aten_table`) into a
`GraphModule` (`convert`). Its attributes are the model's ``state_dict``
names, its placeholders are named after ``forward``'s parameters and carry
their `TensorMeta` with symbolic dims where ``dynamic_shapes`` declared
them (a ``torch.export.Dim("N")`` becomes the fxkit dim ``N``), and shape
arithmetic on those dims stays graph arithmetic (``size``, ``mul``), so one
import runs at every batch size.

Example:
    >>> N = torch.export.Dim("N")
    >>> gm = import_program(torch, model, (x,), ({0: N},))
    >>> fxkit.transforms.infer_shapes(gm, *input_specs(gm))
"""
from fxkit.interop.torch_export.capture import capture as capture_program
from fxkit.interop.torch_export.convert import Converter
from fxkit.interop.torch_export.symbols import dim_names


def import_program(torch, model, example_inputs, dynamic_shapes=None):
    """``model`` captured by torch.export on ``example_inputs`` and rebuilt as a `GraphModule`."""
    args, kwargs = split_inputs(torch, example_inputs)
    program = capture_program(torch, model, args, kwargs, dynamic_shapes)
    return Converter(torch, model, program, dim_names(torch, program, dynamic_shapes)).run()


def input_specs(gm):
    """The placeholders' `TensorMeta` (symbolic where dims are dynamic): specs for `infer_shapes`."""
    return [n.meta["tensor_meta"] for n in gm.graph.nodes if n.op == "placeholder"]


def split_inputs(torch, example_inputs):
    """``example_inputs`` (a tensor, a tuple of arguments or a dict of keyword arguments) as ``(args, kwargs)``."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    return tuple(example_inputs), {}
