"""The ``numpy`` backend: straight-line Python over numpy arrays, reusing dead buffers.

After the default pipeline (`Backend.passes`: dropout removal, conv-bn
folding, specialisation to registry ops, dead code, CSE, constant folding)
every op becomes one statement of a generated function: a numpy ufunc call
where the op is exactly one (`fxkit.backends.memory_plan.UFUNC_FORMS`),
writing into a buffer the memory plan found dead, and the op's own
implementation on raw arrays otherwise. Dtype promotion is resolved when the
code is generated, so nothing is dispatched at run time.

Example:
    >>> compiled = fxkit.compile(lambda x: (x * x) * (x * x), backend="numpy", example_inputs=[(5,)])
    >>> print(compiled.code)
    def forward(x):
        mul = multiply(x, x)
        mul_1 = multiply(mul, mul, out=mul)
        return mul_1
"""
import itertools

import numpy as np

from fxkit.backends.backend import Backend, Lowered, register_backend
from fxkit.backends.memory_plan import plan_buffers, ufunc_forms
from fxkit.codegen.numpy_code import generate_array_code
from fxkit.errors import DeviceError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.tensor import Tensor

_FILE_NUMBERS = itertools.count()


class NumpyBackend(Backend):
    """Generated Python over numpy arrays on the cpu (see the module docstring)."""

    name = "numpy"
    device_types = ("cpu",)

    def lower(self, gm, specs):
        nodes = list(gm.graph.nodes)
        _check_devices(nodes, self.device_types, self.name)
        return build_forward(gm, nodes, np, self.name)

    def kernel_calls(self, gm):
        """``(calls, kernels, writers, decisions)`` of `build_forward` for the nodes this backend runs
        as its own kernels (it may rewrite ``gm``'s graph first, e.g. put back a group it runs as ops).

        The numpy backend has none; a backend generating kernels (numba) returns
        them, so a backend lowering a graph around other runners (a delegate)
        can add them to `build_forward`'s arguments.
        """
        return {}, {}, (), ()


def build_forward(gm, nodes, xp, backend, calls=None, kernels=None, writers=(), decisions=()):
    """The straight-line forward over ``xp`` arrays that every array backend lowers to.

    Args:
        gm: the prepared GraphModule; ``nodes`` its graph's nodes.
        xp: the array module the code runs on (numpy or cupy).
        backend: the backend's name, shown in the generated code's file name.
        calls: ``{node: callable}`` for nodes a backend runs as its own kernels.
        kernels: ``{name: source}`` of those kernels, for ``kernel_sources()``.
        writers: nodes among ``calls`` whose function takes ``out=``, a dead buffer of the
            result's shape and dtype that it may also read at the same positions.
        decisions: the backend's lowering choices, for ``explain()``.
    """
    forms = ufunc_forms(nodes)
    buffers = plan_buffers(nodes, set(forms) | set(writers))
    code, line_nodes = generate_array_code(nodes, attributes(gm, nodes), forms, buffers, xp, calls)
    filename = f"<fxkit-compiled {backend} {type(gm).__name__} #{next(_FILE_NUMBERS)}>"
    namespace = dict(code.globals)
    exec(code.compile(filename), namespace)
    return Lowered(namespace["forward"], code.src, kernels or {}, line_nodes, filename, tuple(decisions))


def attributes(gm, nodes):
    """``{qualified name: value}`` the generated code reads: raw arrays for tensors, modules as they are."""
    found = {}
    for node in nodes:
        if node.op in ("get_attr", "call") and type(node.target) is str:
            value = gm.get_submodule(node.target) if node.op == "call" else _fetch(gm, node.target)
            found[node.target] = value._data if isinstance(value, Tensor) else value
    return found


def _fetch(module, qualname):
    *path, field = qualname.split(".")
    owner = module.get_submodule(".".join(path)) if path else module
    return getattr(owner, field)


def _check_devices(nodes, device_types, backend):
    """Refuse a graph with tensors (parameters included) on devices the backend does not run on."""
    for node in nodes:
        meta = node.meta.get("tensor_meta")
        for spec in _tensor_metas(meta):
            if spec.device.type not in device_types:
                what = "the parameter" if node.op == "get_attr" else "the value"
                raise DeviceError(f"the {backend} backend runs on {' and '.join(device_types)}, but {what} "
                                  f"%{node.name} is on {spec.device}; move the model with "
                                  f".to('{device_types[0]}') or compile with a backend for {spec.device.type}")


def _tensor_metas(meta):
    if isinstance(meta, TensorMeta):
        yield meta
    elif isinstance(meta, (tuple, list)):
        for m in meta:
            yield from _tensor_metas(m)
    elif isinstance(meta, dict):
        for m in meta.values():
            yield from _tensor_metas(m)


register_backend(NumpyBackend())
