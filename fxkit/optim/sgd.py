"""`SGD`: stochastic gradient descent with momentum, dampening, Nesterov momentum
and weight decay, step for step PyTorch's ``torch.optim.SGD``."""
import numpy as np

from fxkit.optim.optimizer import Optimizer, check_nonnegative, chunks, state_tensor

FUSED_MIN = 1 << 17
"""Elements from which a CPU parameter with momentum is updated by one numba loop
(`fxkit.optim.fused_sgd`): below it the array form's passes already stay in cache, and a small
model's optimizer does not load numba."""


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum.

    Each step, for a parameter ``p`` with gradient ``g`` (PyTorch's formulation,
    where the learning rate multiplies the velocity, not the gradient)::

        g = -g if maximize;  g = g + weight_decay * p
        b = g (first step) or momentum * b + (1 - dampening) * g
        g = g + momentum * b if nesterov else b
        p = p - lr * g

    Args:
        params: the parameters, or parameter groups (see `Optimizer`).
        lr: learning rate (default 1e-3, as in PyTorch).
        momentum: momentum factor (0 turns the buffer off).
        dampening: dampening of the momentum.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum (needs momentum > 0 and dampening 0).
        maximize: ascend the objective instead of descending.

    Example:
        >>> opt = fxkit.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False):
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                    "nesterov": nesterov, "maximize": maximize}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_nonnegative(group, "lr", "learning rate")
        check_nonnegative(group, "momentum", "momentum value")
        check_nonnegative(group, "weight_decay", "weight_decay value")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"Nesterov momentum requires a momentum and zero dampening, got "
                             f"momentum={group['momentum']}, dampening={group['dampening']}")

    def _update(self, param, g, state, group):
        momentum = group["momentum"]
        kept = state.get("momentum_buffer")
        if momentum != 0 and _fusable(param._data, g, None if kept is None else kept._data):
            from fxkit.optim.fused_sgd import fused_sgd_update  # NOTE: numba loads at the first large parameter

            if kept is None:
                state["momentum_buffer"] = state_tensor(np.empty_like(param._data), param)
            fused_sgd_update(param._data, g, state["momentum_buffer"]._data, kept is None, group)
            return
        buf = None
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                # the first step's buffer is the (decayed, negated) gradient itself
                buf = _direction(param._data, g, group).copy()
                state["momentum_buffer"] = state_tensor(buf, param)
                first = True
            else:
                buf, first = buf._data, False
        if buf is None:
            for p, gs in chunks(param._data, g):
                p -= group["lr"] * _direction(p, gs, group)
            return
        dampening = group["dampening"]
        for p, gs, b in chunks(param._data, g, buf):
            d = _direction(p, gs, group)
            if not first:
                b *= momentum
                b += d if dampening == 0 else (1 - dampening) * d
            p -= group["lr"] * (d + momentum * b if group["nesterov"] else b)


def _fusable(p, g, buf):
    """Whether ``p``, its gradient ``g`` and its momentum buffer (None before the first step) take
    `fxkit.optim.fused_sgd`: C-contiguous numpy arrays of one float dtype (float32 or float64), of
    `FUSED_MIN` elements or more."""
    arrays = (p, g) if buf is None else (p, g, buf)
    return (p.size >= FUSED_MIN and p.dtype in (np.float32, np.float64)
            and all(type(a) is np.ndarray and a.dtype == p.dtype and a.shape == p.shape and a.flags.c_contiguous
                    for a in arrays))


def _direction(p, g, group):
    """The gradient as the update sees it: negated when maximizing, plus the L2 decay."""
    if group["maximize"]:
        g = -g
    if group["weight_decay"] != 0:
        g = g + group["weight_decay"] * p
    return g
