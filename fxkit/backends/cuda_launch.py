"""`CudaKernelCall`: one generated CUDA kernel as a function of raw arrays.

Generated code calls a fused group like a ufunc, ``mul_9 = fused_0(x)``;
`CudaKernelCall` allocates the outputs (cupy's memory pool makes that cheap
and keeps results independent: a result is never overwritten behind the
caller's back), picks the entry point (``kernel`` when every array input is
C-contiguous, else ``kernel_strided`` with each input's element strides, or,
for a kernel without one, contiguous copies), and launches it:

* elementwise kernels: blocks of `THREADS` threads, as many as the elements
  need up to ``max_blocks`` (the grid-stride loop covers the rest);
* row kernels: a block a row (`fxkit.codegen.cuda_rows.block_size` threads),
  up to ``max_blocks`` blocks striding over the rows.

The module only needs ``get_function(name)`` returning a callable
``f(grid, block, args)``, which ``cupy.RawModule`` provides; tests give it
the same kernels compiled for the CPU.
"""
import numpy as np

from fxkit.codegen.cuda_kernel import strided_axes
from fxkit.codegen.cuda_rows import block_size
from fxkit.runtime.meta import TensorMeta

THREADS = 256
"""Threads a block of an elementwise kernel."""
_SCALARS = {bool: np.bool_, int: np.int64, float: np.float64}  # the C types bool, long long, double


class CudaKernelCall:
    """Launches one compiled kernel on raw arrays and returns its output(s).

    Args:
        name: the fused op's name (``fused_0``); the generated code's global.
        kernel: the `fxkit.codegen.cuda_kernel.CudaKernelSource` it was compiled from.
        module: the loaded module (``get_function("kernel")``, maybe ``"kernel_strided"``).
        xp: the array module of its arrays (cupy; numpy for kernels built for the CPU).
        max_blocks: the most blocks a launch uses.
    """

    __slots__ = ("__name__", "kernel", "_xp", "_contiguous", "_strided", "_arrays", "_convert", "_outputs",
                 "_grid", "_block", "_single")

    def __init__(self, name, kernel, module, xp, max_blocks):
        self.__name__ = name
        self.kernel = kernel
        self._xp = xp
        self._contiguous = module.get_function("kernel")
        self._strided = module.get_function("kernel_strided") if kernel.strided else None
        self._arrays = tuple(i for i, m in enumerate(kernel.inputs) if isinstance(m, TensorMeta))
        self._convert = tuple(None if isinstance(m, TensorMeta) else _SCALARS[m] for m in kernel.inputs)
        self._outputs = [(tuple(m.shape), m.dtype.np) for m in kernel.outputs]
        self._single = len(kernel.outputs) == 1
        if kernel.row_length is None:
            self._block = (THREADS,)
            self._grid = (min(-(-kernel.size // THREADS), max_blocks),)
        else:
            self._block = (block_size(kernel.row_length),)
            self._grid = (min(kernel.size, max_blocks),) if kernel.row_length else (0,)

    def __call__(self, *args):
        xp = self._xp
        outs = [xp.empty(shape, dtype) for shape, dtype in self._outputs]
        if self._grid[0]:
            entry, strides = self._contiguous, ()
            for i in self._arrays:
                if not args[i].flags.c_contiguous:
                    if self._strided is not None:
                        entry = self._strided
                        strides = [np.int64(args[k].strides[axis] // args[k].itemsize)
                                   for k in self._arrays for axis in strided_axes(args[k].shape)]
                    else:
                        args = [xp.ascontiguousarray(a) if k in self._arrays else a for k, a in enumerate(args)]
                    break
            values = [a if convert is None else convert(a) for a, convert in zip(args, self._convert)]
            entry(self._grid, self._block, (*outs, *values, *strides))
        return outs[0] if self._single else tuple(outs)

    def __repr__(self):
        return f"<CUDA kernel {self.__name__}>"
