"""Every backend at the extremes of each float dtype agrees with PyTorch, for every elementwise op:
the numpy backend's generated code, the numba kernels (with the polynomials of
``fxkit/backends/numba_math.py``) and the CUDA kernel text compiled and run on the CPU. The sweep
and the allowed differences are `tests.runtime.edge_values`'s, as for eager mode."""
import numpy as np
import pytest

import fxkit
from fxkit.runtime.registry import get_op
from tests.backends.cuda_host import CXX, HostCompiler
from tests.backends.fused_cases import single_op_group
from tests.runtime.edge_values import CASES, FLOAT_DTYPES, assert_matches_torch, case_inputs, torch_result

torch = pytest.importorskip("torch")


def _compiled_result(backend, name, args, kwargs):
    """The op through ``fxkit.compile``: array arguments are graph inputs, the rest constants."""
    positions = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    op = get_op(name)

    def call(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return op(*full, **kwargs)

    f = [lambda x0: call(x0), lambda x0, x1: call(x0, x1), lambda x0, x1, x2: call(x0, x1, x2)][len(positions) - 1]

    inputs = [fxkit.from_numpy(args[i].copy()) for i in positions]
    with np.errstate(all="ignore"):
        return fxkit.compile(f, backend=backend, example_inputs=inputs)(*inputs).numpy()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_numpy_backend_agrees_with_torch_at_the_extremes(case, dtype):
    name, args, kwargs = case_inputs(case, dtype)
    got = _compiled_result("numpy", name, args, kwargs)
    assert_matches_torch(got, torch_result(torch, name, args, kwargs), case, dtype, args, f"numpy {case} {dtype}")


@pytest.mark.slow  # a numba kernel per case, compiled once and then loaded from the disk cache
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_numba_backend_agrees_with_torch_at_the_extremes(case, dtype):
    pytest.importorskip("numba")
    name, args, kwargs = case_inputs(case, dtype)
    got = _compiled_result("numba", name, args, kwargs)
    assert_matches_torch(got, torch_result(torch, name, args, kwargs), case, dtype, args, f"numba {case} {dtype}")


_CUDA_DTYPES = [d for d in FLOAT_DTYPES if d != "bfloat16"]  # CUDA kernels take no bfloat16 (cupy runs it)


def _cuda_kernel(case, dtype):
    from fxkit.codegen.cuda_kernel import elementwise_kernel
    from fxkit.runtime.meta import TensorMeta

    name, args, kwargs = case_inputs(case, dtype)
    fused, inputs = single_op_group(get_op(name), args, kwargs)
    metas = [TensorMeta(a.shape, fxkit.runtime.dtypes.from_numpy(a.dtype)) for a in inputs]
    return name, args, kwargs, inputs, elementwise_kernel(fused, metas)


@pytest.fixture(scope="module")
def cuda_kernels(tmp_path_factory):
    """Every case's CUDA kernel, compiled for the CPU in one batch."""
    host = HostCompiler(str(tmp_path_factory.mktemp("cuda_edges")))
    kernels = {(c, d): _cuda_kernel(c, d) for c in sorted(CASES) for d in _CUDA_DTYPES}
    host.compile([k[-1].source for k in kernels.values()])
    return host, kernels


@pytest.mark.slow  # one g++ run over every kernel
@pytest.mark.skipif(CXX is None, reason="needs g++ to run CUDA kernels on the CPU")
@pytest.mark.parametrize("dtype", _CUDA_DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_kernels_agree_with_torch_at_the_extremes(case, dtype, cuda_kernels):
    from fxkit.backends.cuda_launch import CudaKernelCall

    host, kernels = cuda_kernels
    name, args, kwargs, inputs, source = kernels[(case, dtype)]
    with np.errstate(all="ignore"):
        got = CudaKernelCall("k", source, host.load(source.source), np, 1)(*inputs)
    assert_matches_torch(got, torch_result(torch, name, args, kwargs), case, dtype, args, f"cuda {case} {dtype}")
