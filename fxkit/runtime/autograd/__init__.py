"""Reverse-mode automatic differentiation on `fxkit.Tensor` (``fxkit.autograd``).

Ops called on tensors that require grad are recorded as `Node`s (each tensor's
``grad_fn``); ``loss.backward()`` runs every node's derivative rule back to
the leaves, which accumulate ``.grad``. The rules live in the op registry
(``op.grad_rule``, filled by ``rules_*.py`` when ``fxkit.runtime`` loads).

Example:
    >>> w = fxkit.randn(3, 4, requires_grad=True)
    >>> loss = (x @ w).relu().sum()
    >>> loss.backward()
    >>> w.grad.shape
    (3, 4)
"""
from fxkit.runtime.autograd.engine import backward, call_between_nodes, grad, queue_callback
from fxkit.runtime.autograd.function import Context, GradRule, Node, NonDifferentiable, defgrad, nondifferentiable
from fxkit.runtime.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

_RULE_MODULES = ("rules_elementwise", "rules_reductions", "rules_linalg", "rules_shape", "rules_indexing",
                 "rules_nn", "rules_attention", "rules_conv", "rules_conv3d", "rules_loss", "rules_nondiff")


def load_rules():
    """Register the backward ops and attach every op's derivative rule (after the ops exist)."""
    import importlib

    for name in ("backward_ops",) + _RULE_MODULES:
        importlib.import_module(f"fxkit.runtime.autograd.{name}")


def gradcheck(fn, inputs, **options):
    """Check ``fn``'s analytic gradients against finite differences (see `gradcheck.gradcheck`)."""
    from fxkit.runtime.autograd.gradcheck import gradcheck as check

    return check(fn, inputs, **options)


__all__ = ["backward", "grad", "queue_callback", "call_between_nodes", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "gradcheck", "defgrad", "nondifferentiable", "GradRule", "NonDifferentiable", "Node",
           "Context"]
