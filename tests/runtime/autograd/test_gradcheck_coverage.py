"""Every registered op has a derivative rule that passes a float64 finite-difference
gradcheck, or is marked non-differentiable and refuses a gradient through it.

The inputs are the op test cases (tests/runtime/cases): floating inputs become
float64 leaves that require grad, the rest stay as they are.
"""
import numpy as np
import pytest

import fxkit
from fxkit.errors import AutogradError
from fxkit.runtime.autograd import GradRule, NonDifferentiable, gradcheck
from fxkit.runtime.autograd.function import iter_tensors, substitute
from fxkit.runtime.registry import all_ops, get_op
from tests.runtime.opcheck import Case, load_all_cases, randf, to_fxkit

CASES = load_all_cases()
EXTRA = [  # ops whose test cases have no finite floating input to differentiate or to refuse
    Case("float", lambda r: ((randf(r, 3, 4, dtype=np.float64),), {}), None, "float64-to-float32"),
    Case("sign", lambda r: ((randf(r, 3, 4, dtype=np.float64),), {}), None, "float64"),
    Case("long", lambda r: ((randf(r, 3, 4, dtype=np.float64),), {}), None, "float64-to-int64"),
    Case("floor_divide", lambda r: ((randf(r, 3, 4, dtype=np.float64), 0.7), {}), None, "float"),
]


def _rule(c):
    return get_op(c.op).grad_rule


def _float64(value):
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, order="K") if value.dtype.kind == "f" else value
    if isinstance(value, (tuple, list)):
        return type(value)(_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _float64(v) for k, v in value.items()}
    return value


class Prepared:
    """A case as a function of its floating inputs (leaves that require grad)."""

    def __init__(self, c, rng, device="cpu"):
        self.case = c
        self.op = get_op(c.op)
        args, kwargs = c.make(rng)
        self.args, self.kwargs = to_fxkit(_float64(args), device), to_fxkit(_float64(kwargs), device)
        rule = self.op.grad_rule
        self.paths, self.inputs = [], []
        for path, t in iter_tensors(self.args, self.kwargs):
            if t._data.dtype.kind == "f" and not (isinstance(rule, GradRule) and rule.name_of(path) in rule.nondiff):
                self.paths.append(path)
                self.inputs.append(t.to(device, copy=True).requires_grad_())

    def __call__(self, *values):
        chosen = dict(zip(self.paths, values))
        args, kwargs = substitute(self.args, self.kwargs, lambda path, t: chosen.get(path, t))
        if self.case.mutates:
            args[0] = args[0] * 1.0  # the op writes into it: give it a copy inside the graph
        out = self.op(*args, **kwargs)
        return args[0] if self.case.mutates else out

    def reseed(self):
        fxkit.manual_seed(1234)


def _outputs(out):
    items = out if isinstance(out, (tuple, list)) else [out]
    return [o for o in items if isinstance(o, fxkit.Tensor)]


def _check(c, rng, device="cpu"):
    """Gradcheck one case; a reason string when the case cannot be checked."""
    prepared = Prepared(c, rng, device)
    if c.op == "embedding" and prepared.kwargs.get("padding_idx") is not None:
        return "the padding row's gradient is zero by definition (checked against PyTorch in test_engine.py)"
    if not prepared.inputs:
        return "no floating input to differentiate"
    if any(not np.isfinite(t.cpu().numpy()).all() for t in prepared.inputs):
        return "non-finite inputs"
    with fxkit.no_grad():
        prepared.reseed()
        probe = _outputs(prepared(*prepared.inputs))
    floats = [o for o in probe if o.dtype.is_floating_point]
    if not floats:
        return "no floating output"
    if any(not np.isfinite(o.cpu().numpy()).all() for o in floats):
        return "non-finite outputs"
    try:
        gradcheck(prepared, prepared.inputs, reseed=prepared.reseed)
    except AutogradError:
        # A kink exactly at the case's values (ties, rounding boundaries, zeros under relu) has a
        # conventional derivative, and a jump close by (remainder by a small divisor) defeats the
        # finite difference: move the inputs off the kink, and take a smaller step.
        moved = [(t.detach() + fxkit.from_numpy(rng.standard_normal(t.shape) * 1e-3).to(device)).requires_grad_()
                 for t in prepared.inputs]
        try:
            gradcheck(prepared, moved, reseed=prepared.reseed)
        except AutogradError:
            gradcheck(prepared, moved, reseed=prepared.reseed, eps=1e-9, rtol=1e-4)
    return None


DIFFERENTIABLE = [c for c in CASES if isinstance(_rule(c), GradRule)]


@pytest.mark.parametrize("c", DIFFERENTIABLE, ids=repr)
def test_gradient_matches_finite_differences(c, device, rng):
    reason = _check(c, rng, device)
    if reason:
        pytest.skip(reason)


def test_every_op_is_differentiable_or_marked():
    unmarked = sorted(op.name for op in all_ops() if not isinstance(op.grad_rule, (GradRule, NonDifferentiable)))
    assert not unmarked, (f"ops with neither a grad rule nor a non-differentiable mark: {unmarked}; add a rule "
                          f"(fxkit/runtime/autograd/rules_*.py) or mark them in rules_nondiff.py")


def test_every_differentiable_op_passes_gradcheck():
    """Each op with a rule has at least one case that is gradchecked (not skipped)."""
    rng = np.random.default_rng(0)
    unchecked = []
    for op in all_ops():
        if not isinstance(op.grad_rule, GradRule):
            continue
        cases = [c for c in CASES + EXTRA if c.op == op.name]
        if not any(_check(c, rng) is None for c in cases):
            unchecked.append(op.name)
    assert not unchecked, f"differentiable ops without a gradchecked float case: {unchecked}"


NONDIFF = [c for c in CASES + EXTRA if isinstance(_rule(c), NonDifferentiable)]


@pytest.mark.parametrize("c", NONDIFF, ids=repr)
def test_non_differentiable_op_refuses_a_gradient(c, rng):
    prepared = Prepared(c, rng)
    if not prepared.inputs:
        pytest.skip("no floating input that could require grad")
    outputs = _outputs(prepared(*prepared.inputs))
    if not outputs:
        pytest.skip("returns Python values")
    for out in outputs:
        assert not out.requires_grad
        with pytest.raises(AutogradError, match=f"computed through {c.op}, which is not differentiable"):
            out.backward(fxkit.ones_like(out))


def test_argmax_backward_names_argmax():
    x = fxkit.randn(5, requires_grad=True)
    with pytest.raises(AutogradError, match=r"through argmax, which is not differentiable \(it returns integer"):
        x.argmax().backward()


def test_values_derived_from_a_non_differentiable_result_name_it():
    x = fxkit.randn(5, requires_grad=True)
    y = (x > 0).float() * 2
    with pytest.raises(AutogradError, match="computed through gt"):
        y.sum().backward()
    (x * (x > 0).float()).sum().backward()  # the other path still differentiates
    np.testing.assert_array_equal(x.grad.numpy(), (x.numpy() > 0).astype(np.float32))
