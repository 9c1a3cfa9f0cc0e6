"""Every registry op with a PyTorch twin takes PyTorch's parameter names, in PyTorch's order.

The twin's names come from ``torch.nn.functional`` signatures and ATen schemas
(`tests.peer.torch_signatures`). ``ALLOWED`` lists the deliberate differences with
their reasons (mostly one fxkit op standing for several ATen overloads). The test
fails when an op differs without being listed and when a listed op agrees, so the
list only shrinks.
"""
import pytest

from fxkit.runtime.registry import all_ops
from tests.peer.torch_signatures import agrees, torch_parameter_lists

torch = pytest.importorskip("torch")

ALLOWED = {
    "einsum": ("torch.einsum(equation, *operands) takes the operands as varargs (ATen: tensors); fxkit's op "
               "has one 'operands' parameter holding them, so a graph node's args stay flat"),
    "max_pool2d": ("return_indices is F.max_pool2d's argument (a Python dispatcher between aten::max_pool2d and "
                   "max_pool2d_with_indices); fxkit's one op takes it as F does"),
    "max_pool1d": ("return_indices is F.max_pool1d's argument (a Python dispatcher between aten::max_pool1d and "
                   "max_pool1d_with_indices); fxkit's one op takes it as F does"),
    "max_pool3d": ("return_indices is F.max_pool3d's argument (a Python dispatcher between aten::max_pool3d and "
                   "max_pool3d_with_indices); fxkit's one op takes it as F does"),
    "adaptive_max_pool2d": ("return_indices is F.adaptive_max_pool2d's argument (a Python dispatcher between "
                            "aten::adaptive_max_pool2d and its with-indices form); fxkit's one op takes it as F does"),
    "max": ("torch.max is three ATen overloads (max(input), max.dim(input, dim, keepdim), max.other(input, "
            "other)); fxkit's one op takes max.dim's parameters and max.other's 'other' by keyword"),
    "min": ("torch.min is three ATen overloads (min(input), min.dim(input, dim, keepdim), min.other(input, "
            "other)); fxkit's one op takes min.dim's parameters and min.other's 'other' by keyword"),
    "var": ("torch.var is ATen's var.dim(input, dim, unbiased, keepdim) and var.correction(input, dim, *, "
            "correction, keepdim) overloads; fxkit's one op takes var.dim's parameters and 'correction' by keyword"),
    "var_mean": ("torch.var_mean is ATen's var_mean(input, unbiased), var_mean.dim(input, dim, unbiased, keepdim) "
                 "and var_mean.correction(input, dim, *, correction, keepdim) overloads; fxkit's one op takes "
                 "var_mean.dim's parameters and 'correction' by keyword, as var does"),
    "std_mean": ("torch.std_mean is ATen's std_mean(input, unbiased), std_mean.dim(input, dim, unbiased, keepdim) "
                 "and std_mean.correction(input, dim, *, correction, keepdim) overloads; fxkit's one op takes "
                 "std_mean.dim's parameters and 'correction' by keyword, as std does"),
    "scatter": ("torch.scatter is ATen's scatter.src(input, dim, index, src), scatter.value(input, dim, index, "
                "value) and their reduce= forms; fxkit's one op takes src or value, and reduce, by keyword"),
    "to": ("Tensor.to is ATen's to.dtype(input, dtype, non_blocking, copy), to.device(input, device, dtype, ...) "
           "and to.other(input, other, ...), told apart by the first argument's type; fxkit's one op takes that "
           "argument in *args and dtype, device, copy, non_blocking by keyword"),
    "nll_loss_backward": ("ATen's nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, "
                          "total_weight) reads self only for its shape and takes the forward's summed weights; "
                          "fxkit's op takes input_shape (the rule keeps no activation alive for it), sums the "
                          "weights itself and takes reduction as a string, as nll_loss does"),
    "max_pool2d_with_indices_backward": ("ATen's max_pool2d_with_indices_backward(grad_output, self, ...) reads self "
                                         "only for its shape; fxkit's op takes input_shape (the rule keeps no "
                                         "activation alive for it), as nll_loss_backward"),
    "std": ("torch.std is ATen's std.dim(input, dim, unbiased, keepdim) and std.correction(input, dim, *, "
            "correction, keepdim) overloads; fxkit's one op takes std.dim's parameters and 'correction' by keyword"),
}



def _our_spellings(op):
    """The op's parameter names, and (when it has one) the same without a ``*sizes`` that keyword-only
    parameters follow: that is the varargs spelling of the first of them (``x.permute(0, 2, 1)`` is
    ``x.permute(dims=(0, 2, 1))``, as PyTorch's bindings take both)."""
    params = list(op.signature.parameters.values())
    names = [p.name for p in params]
    spellings = [names]
    for i, p in enumerate(params[:-1]):
        if p.kind is p.VAR_POSITIONAL and params[i + 1].kind is p.KEYWORD_ONLY:
            spellings.append(names[:i] + names[i + 1:])
    return spellings


def _differences():
    found = {}
    for op in all_ops():
        spellings = _our_spellings(op)
        ours = spellings[-1]
        lists = torch_parameter_lists(torch, op.name)
        if lists and not any(agrees(s, positional, names) for s in spellings for positional, names in lists):
            found[op.name] = (ours, lists[0][1])
    return found


def test_every_op_with_a_torch_twin_takes_torch_parameter_names():
    differences = _differences()
    unlisted = {name: d for name, d in differences.items() if name not in ALLOWED}
    assert not unlisted, "ops whose parameters differ from PyTorch's (ours, PyTorch's): " + "; ".join(
        f"{name}{ours} vs {theirs}" for name, (ours, theirs) in sorted(unlisted.items()))
    agreeing = sorted(set(ALLOWED) - set(differences))
    assert not agreeing, f"listed ops that now agree with PyTorch; take them off ALLOWED: {agreeing}"


def test_the_check_covers_the_ops_with_a_twin():
    twins = [op.name for op in all_ops() if torch_parameter_lists(torch, op.name)]
    assert len(twins) >= 140 and {"conv2d", "layer_norm", "add", "relu", "sum"} <= set(twins)


def test_calls_by_pytorch_keywords_give_pytorch_results():
    """The renamed parameters work by keyword, with PyTorch's results."""
    import numpy as np

    import fxkit
    from fxkit.runtime.registry import get_op

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    m, n = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    index = np.array([[0, 2], [1, 0]])
    x, y, w, c = (fxkit.from_numpy(v) for v in (a, b, m, n))
    tx, ty, tw, tc = (torch.from_numpy(v) for v in (a, b, m, n))
    cases = [
        (get_op("add")(input=x, other=y, alpha=2), torch.add(input=tx, other=ty, alpha=2)),
        (get_op("relu")(input=x), torch.nn.functional.relu(input=tx)),
        (x.sum(dim=1, keepdim=True), tx.sum(dim=1, keepdim=True)),
        (get_op("pow")(input=x, exponent=2), torch.pow(input=tx, exponent=2)),
        (get_op("lerp")(input=x, end=y, weight=0.3), torch.lerp(input=tx, end=ty, weight=0.3)),
        (get_op("where")(condition=x > 0, input=x, other=y), torch.where(condition=tx > 0, input=tx, other=ty)),
        (get_op("addmm")(input=c, mat1=x, mat2=w, beta=0.5, alpha=2),
         torch.addmm(input=tc, mat1=tx, mat2=tw, beta=0.5, alpha=2)),
        (get_op("softmax")(input=x, dim=1), torch.softmax(input=tx, dim=1)),
        (get_op("gather")(input=x, dim=1, index=fxkit.from_numpy(index)),
         torch.gather(input=tx, dim=1, index=torch.from_numpy(index))),
        (x.view(size=(3, 2)), tx.view(size=(3, 2))),
        (x[:1].expand(size=(4, 3)), tx[:1].expand(size=(4, 3))),
        (x.repeat(repeats=(2, 1)), tx.repeat(repeats=(2, 1))),
        (x.split(split_size=2, dim=1)[1], tx.split(split_size=2, dim=1)[1]),
        (x.transpose(dim0=0, dim1=1), tx.transpose(dim0=0, dim1=1)),
    ]
    for ours, theirs in cases:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
