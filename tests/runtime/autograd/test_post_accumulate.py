"""Post-accumulate-grad hooks, queued callbacks and between-node callbacks: what data-parallel training hooks
into."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import AutogradError


def test_a_leaf_used_twice_accumulates_once_then_its_hook_sees_the_sum():
    w = fxkit.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    ((w * 3.0).sum() + (w * w).sum()).backward()
    np.testing.assert_allclose(seen, [[5.0, 7.0]])  # 3 + 2w, summed before accumulating
    np.testing.assert_allclose(w.grad.numpy(), [5.0, 7.0])


def test_hooks_fire_in_the_order_gradients_become_final_and_callbacks_run_after_all():
    first = fxkit.nn.Linear(3, 4)
    second = fxkit.nn.Linear(4, 2)
    events = []
    for name, p in [("first.weight", first.weight), ("second.weight", second.weight)]:
        def hook(t, name=name):
            events.append(name)
            if len(events) == 1:
                fxkit.autograd.queue_callback(lambda: events.append("callback"))
        p.register_post_accumulate_grad_hook(hook)
    second(first(fxkit.randn(5, 3))).sum().backward()
    assert events == ["second.weight", "first.weight", "callback"]


def test_between_node_callbacks_run_after_each_remaining_node_of_that_backward_only():
    first = fxkit.nn.Linear(3, 4)
    second = fxkit.nn.Linear(4, 2)
    events = []

    def hook(t):
        if not events:
            fxkit.autograd.call_between_nodes(lambda: events.append("between"))
        events.append("hook")

    second.weight.register_post_accumulate_grad_hook(hook)
    x = fxkit.randn(5, 3, requires_grad=True)
    second(first(x)).sum().backward()
    # sum, second's linear (its hook registers the callback inside that node), first's linear
    assert events == ["hook", "between", "between"]
    events.append("second backward")
    (x * 2).sum().backward()
    assert events[-1] == "second backward"
    row = (first.weight.numpy().T.astype(np.float64) @ second.weight.numpy().T).sum(1) + 2.0
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(row, (5, 3)), rtol=1e-5)


def test_a_removed_hook_no_longer_fires():
    w = fxkit.tensor([1.0], requires_grad=True)
    calls = []
    handle = w.register_post_accumulate_grad_hook(lambda t: calls.append(1))
    handle.remove()
    (w * 2).sum().backward()
    assert calls == []


def test_misuse_says_what_to_do_instead():
    with pytest.raises(AutogradError, match=r"no backward pass is running; call it from a gradient hook"):
        fxkit.autograd.queue_callback(lambda: None)
    with pytest.raises(AutogradError, match=r"call_between_nodes: no backward pass is running"):
        fxkit.autograd.call_between_nodes(lambda: None)
    w = fxkit.tensor([1.0], requires_grad=True)
    with pytest.raises(AutogradError, match=r"only leaf tensors accumulate gradients.*use register_hook"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
