"""Single-op fused groups built from the op harness's cases, shared by the kernel-generator tests
(numba and CUDA): every elementwise template is checked through the same groups."""
import copy

import numpy as np

from fxkit.graph import Graph
from fxkit.runtime.registry import get_op
from fxkit.transforms.fused_op import FusedOp
from tests.runtime.opcheck import load_all_cases, to_fxkit

ELEMENTWISE_CASES = [c for c in load_all_cases() if get_op(c.op).kind == "elementwise" and not c.mutates]


def single_op_group(op, args, kwargs):
    """A FusedOp calling ``op`` once: arrays become its inputs, everything else stays a constant."""
    body = Graph()
    inputs = []

    def lift(value):
        if isinstance(value, np.ndarray):
            inputs.append(value)
            return body.placeholder(f"x{len(inputs) - 1}")
        if type(value) in (list, tuple):
            return type(value)(lift(v) for v in value)
        return value

    call_args = lift(tuple(args))
    call_kwargs = {k: lift(v) for k, v in kwargs.items()}
    body.output(body.call(op, call_args, call_kwargs))
    return FusedOp("fused_0", body), inputs


def without_kernel(op, args, kwargs):
    """Why no kernel may compute this case, or None: eager mode checks the values of some integer
    results (a division by zero raises) where a kernel cannot, so those calls run the op's impl."""
    result = op(*to_fxkit(copy.deepcopy(args), "cpu"), **to_fxkit(copy.deepcopy(kwargs), "cpu"))
    if op.kernel_template(result.dtype) is None:
        return f"{op.name} checks the values of {result.dtype.name} results (Op.integer_checks): no kernel"
    return None
