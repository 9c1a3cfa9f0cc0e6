"""``fxkit.optim``: optimizers and learning-rate schedulers with ``torch.optim``'s API.

Example:
    >>> opt = fxkit.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> sched = fxkit.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    >>> for x, y in loader:
    ...     opt.zero_grad()
    ...     F.nll_loss(model(x), y).backward()
    ...     opt.step()
    >>> sched.step()
"""
from fxkit.optim import lr_scheduler
from fxkit.optim.adam import Adam, AdamW
from fxkit.optim.optimizer import Optimizer
from fxkit.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
