"""`Adam` and `AdamW`, step for step PyTorch's ``torch.optim.Adam`` / ``AdamW``
(the single-tensor path PyTorch takes on CPU: same formulas, same order of
float32 operations)."""
import numbers

from fxkit.optim.optimizer import Optimizer, check_nonnegative, chunks, state_tensor


class Adam(Optimizer):
    """Adam: gradient steps scaled by running estimates of the gradient's first and second moments.

    Each step ``t``, for a parameter ``p`` with gradient ``g``::

        g = -g if maximize
        p = p * (1 - lr * weight_decay) if decoupled_weight_decay, else g = g + weight_decay * p
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v) if amsgrad else v
        p = p - lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

    Args:
        params: the parameters, or parameter groups (see `Optimizer`).
        lr: learning rate.
        betas: decay rates ``(beta1, beta2)`` of the moment estimates, each in [0, 1).
        eps: added to the denominator for numerical stability.
        weight_decay: L2 penalty (added to the gradient, or decoupled: see AdamW).
        amsgrad: use the maximum of all second-moment estimates so far (AMSGrad).
        maximize: ascend the objective instead of descending.
        decoupled_weight_decay: shrink the weights directly instead of through
            the gradient (this makes Adam `AdamW`).

    Example:
        >>> opt = fxkit.optim.Adam(model.parameters(), lr=1e-3)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 maximize=False, decoupled_weight_decay=False):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                    "maximize": maximize, "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_nonnegative(group, "lr", "learning rate")
        check_nonnegative(group, "eps", "epsilon value")
        check_nonnegative(group, "weight_decay", "weight_decay value")
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        for i, beta in enumerate(betas):
            if not isinstance(beta, numbers.Real) or not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta!r}; each beta must be in [0, 1)")

    def _update(self, param, g, state, group):
        p = param._data
        xp = param.device.xp
        if not state:
            state["step"] = 0
            state["exp_avg"] = state_tensor(xp.zeros_like(p), param)
            state["exp_avg_sq"] = state_tensor(xp.zeros_like(p), param)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = state_tensor(xp.zeros_like(p), param)
        state["step"] = step = state["step"] + 1
        lr = group["lr"]
        beta1, beta2 = group["betas"]
        weight_decay = group["weight_decay"]
        step_size = lr / (1 - beta1 ** step)
        correction = (1 - beta2 ** step) ** 0.5
        arrays = [p, g, state["exp_avg"]._data, state["exp_avg_sq"]._data]
        if group["amsgrad"]:
            arrays.append(state["max_exp_avg_sq"]._data)
        for ps, gs, m, v, *most in chunks(*arrays):
            if group["maximize"]:
                gs = -gs
            if weight_decay != 0:
                if group["decoupled_weight_decay"]:
                    ps *= 1 - lr * weight_decay
                else:
                    gs = gs + weight_decay * ps
            _lerp_(xp, m, gs, 1 - beta1)
            v *= beta2
            v += (1 - beta2) * gs * gs
            if most:
                v = xp.maximum(most[0], v, out=most[0])
            denom = xp.sqrt(v)
            denom /= correction
            denom += group["eps"]
            update = m * -step_size
            update /= denom
            ps += update


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): the weights shrink by
    ``lr * weight_decay`` each step instead of the decay entering the gradient.

    Same arguments as `Adam`, with ``weight_decay`` defaulting to 1e-2 as in PyTorch.

    Example:
        >>> opt = fxkit.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)


def _lerp_(xp, start, end, weight):
    """``start += weight * (end - start)`` in place, in PyTorch's two-sided form that stays
    precise for weights near 1."""
    diff = end - start
    if abs(weight) < 0.5:
        diff *= weight
        start += diff
    else:
        diff *= 1 - weight
        xp.subtract(end, diff, out=start)
