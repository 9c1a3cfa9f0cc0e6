"""The ``cupy`` backend: each fused group becomes one generated CUDA kernel, the rest runs on cupy.

The pipeline is the numba backend's (`Backend.passes`, then `SplitLinearBias`,
`FuseElementwise` and `FuseRows`): connected elementwise ops become one
group, softmax, log_softmax and layer_norm absorb their elementwise
neighbours. Lowering is the numpy backend's straight-line code over raw
arrays with ``xp=cupy``, except that each fused group launches its generated
kernel (`fxkit.codegen.cuda_kernel`, `fxkit.codegen.cuda_rows`) through a
`CudaKernelCall`. Matrix products and convolutions call the registry
implementations on cupy arrays: ``xp.matmul`` is cuBLAS, and convolutions
are the registry's im2col plus one cuBLAS product. A group no kernel takes
(bfloat16, a row layout row kernels refuse) runs its body with cupy ops.

Kernels are compiled by NVRTC through ``cupy.RawModule`` when the
specialisation is lowered (a compile error surfaces then, with the source),
cached in memory by source and on disk by cupy (``~/.cupy/kernel_cache``),
so identical groups and a second process do not compile again.

Example:
    >>> model = model.to("cuda")
    >>> compiled = fxkit.compile(model, backend="cupy", example_inputs=[x.cuda()])
    >>> print(compiled.kernel_sources()["fused_0"])
    // fused_0
    //   inputs: x0 = %x (float32[16000000])
    //   %mul = call[mul](%x, %x)
    ...
    extern "C" __global__ void kernel(float* __restrict__ out0, const float* __restrict__ x0) {
"""

from fxkit.backends.backend import register_backend
from fxkit.backends.cuda_launch import CudaKernelCall
from fxkit.backends.fuse_rows import FuseRows
from fxkit.backends.kernel_source import fused_kernel_source
from fxkit.backends.numpy_backend import NumpyBackend, _check_devices, _tensor_metas, build_forward
from fxkit.backends.split_bias import SplitLinearBias
from fxkit.codegen.cuda_kernel import elementwise_kernel, unsupported
from fxkit.codegen.cuda_rows import row_kernel
from fxkit.errors import LoweringError
from fxkit.transforms import EliminateDeadCode
from fxkit.transforms.fuse_elementwise import FuseElementwise
from fxkit.transforms.fused_op import FusedOp

BLOCKS_PER_SM = 32
"""Most blocks a launch uses per multiprocessor (grid-stride loops cover larger work)."""


class CupyBackend(NumpyBackend):
    """Fused groups as CUDA kernels, everything else as cupy calls (see the module docstring)."""

    name = "cupy"
    device_types = ("cuda",)

    def passes(self, gm, example_inputs):
        return super().passes(gm, example_inputs) + [SplitLinearBias(), FuseElementwise(), FuseRows(),
                                                     EliminateDeadCode()]

    def lower(self, gm, specs):
        nodes = list(gm.graph.nodes)
        _check_devices(nodes, self.device_types, self.name)
        device = _device_of(nodes)
        # NOTE: cupy is imported by the device module when a cuda device is first named.
        with device.xp.cuda.Device(device.index) as cuda_device:
            max_blocks = BLOCKS_PER_SM * cuda_device.attributes["MultiProcessorCount"]
            lowered = lower_arrays(gm, device.xp, _load_module, max_blocks, self.name)
        forward = lowered.fn

        def run(*arrays):
            with cuda_device:
                return forward(*arrays)

        run.__wrapped__ = forward
        return lowered._replace(fn=run)


def lower_arrays(gm, xp, load_module, max_blocks, backend="cupy"):
    """Lower a prepared ``gm`` to code over ``xp`` arrays, fused groups as CUDA kernels.

    Args:
        gm: the module `CupyBackend.passes` prepared.
        xp: the array module the code calls.
        load_module: ``source -> module`` with ``get_function(name)`` (``cupy.RawModule``).
        max_blocks: the most blocks a kernel launch uses.
        backend: the name shown in the generated code's file name.

    Returns:
        A `Lowered`; ``kernels`` holds each generated kernel's text.
    """
    nodes = list(gm.graph.nodes)
    calls, kernels = {}, {}
    for node in nodes:
        if node.op == "call" and isinstance(node.target, FusedOp):
            source = kernel_source(node)
            if source is not None:
                try:
                    module = load_module(source.source)
                    calls[node] = CudaKernelCall(node.target.name, source, module, xp, max_blocks)
                except Exception as exc:
                    raise LoweringError(f"the CUDA kernel of {node.target.name} does not compile: {exc}\n"
                                        f"{source.text}") from exc
                kernels[node.target.name] = source.text
    return build_forward(gm, nodes, xp, backend, calls, kernels)


def kernel_source(node):
    """The CUDA kernel of a fused call, or None when its group runs with array ops instead."""
    return fused_kernel_source(node, unsupported, row_kernel, elementwise_kernel)


def _device_of(nodes):
    for node in nodes:
        for meta in _tensor_metas(node.meta.get("tensor_meta")):
            return meta.device
    raise LoweringError("the cupy backend needs at least one tensor to know the GPU to run on")


_MODULES = {}


def _load_module(source):
    """The ``cupy.RawModule`` of ``source`` on the current device, compiled once a process."""
    import cupy  # NOTE: only reached with a cuda device, which imported cupy already

    key = (source, cupy.cuda.Device().id)
    module = _MODULES.get(key)
    if module is None:
        module = cupy.RawModule(code=source)
        module.get_function("kernel")  # compiles now: errors surface while lowering
        _MODULES[key] = module
    return module


register_backend(CupyBackend())
