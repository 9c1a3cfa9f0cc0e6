"""Every registered op against its reference, on every device; and the coverage rule."""
import pytest

from fxkit.runtime.registry import all_ops
from tests.runtime.opcheck import load_all_cases, run_case

CASES = load_all_cases()


@pytest.mark.parametrize("c", CASES, ids=repr)
def test_op_matches_reference(c, device, rng):
    run_case(c, device, rng)


def test_every_registered_op_has_a_case():
    covered = {c.op for c in CASES}
    missing = sorted(op.name for op in all_ops() if op.name not in covered)
    assert not missing, f"ops registered without a test case in tests/runtime/cases: {missing}"


def test_every_elementwise_op_has_a_template():
    missing = sorted(op.name for op in all_ops() if op.kind == "elementwise" and op.template is None)
    assert not missing, f"elementwise ops without a kernel template: {missing}"
