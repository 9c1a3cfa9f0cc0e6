"""Learning-rate schedulers: `LRScheduler`, `StepLR`, `ExponentialLR`, with
``torch.optim.lr_scheduler``'s API and the same sequences of learning rates.

A scheduler rewrites ``group["lr"]`` of its optimizer's parameter groups each
time ``scheduler.step()`` is called (once an epoch, after ``optimizer.step()``).

Example:
    >>> opt = fxkit.optim.SGD(model.parameters(), lr=0.1)
    >>> sched = fxkit.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    >>> for epoch in range(100):
    ...     train_one_epoch(opt)
    ...     sched.step()
"""
import abc
import numbers
import warnings

from fxkit.optim.optimizer import Optimizer


class LRScheduler(abc.ABC):
    """Base class of the schedulers: subclasses define `get_lr`.

    Args:
        optimizer: the optimizer whose learning rates to set.
        last_epoch: index of the last epoch done; -1 (the default) starts a
            schedule and records each group's ``initial_lr``. Other values resume
            one, and need ``initial_lr`` in the groups (from a loaded optimizer state).

    Attributes:
        base_lrs: each group's ``initial_lr``.
        last_epoch: the epoch index of the current learning rates.
    """

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer; pass the fxkit.optim optimizer "
                            f"whose learning rate to schedule")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming a "
                                   f"scheduler with last_epoch={last_epoch}; load the optimizer's state_dict "
                                   f"first, or start with last_epoch=-1")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    @abc.abstractmethod
    def get_lr(self):
        """The learning rate of each parameter group for epoch ``last_epoch``, computed
        from the groups' current rates (so schedulers can be chained)."""

    def step(self):
        """Advance one epoch and write the new learning rates into the optimizer."""
        if self._step_count == 1 and self.optimizer._step_count == 0:
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`: call "
                          "`optimizer.step()` first, or the first value of the schedule is skipped", UserWarning,
                          stacklevel=2)
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self):
        """The learning rates set by the last `step` (one per parameter group)."""
        return self._last_lr

    def state_dict(self):
        """The scheduler's state: every attribute except the optimizer."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        """Restore a state from `state_dict`."""
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs.

    Args:
        optimizer: the optimizer.
        step_size: period of the decay, in epochs (a positive int).
        gamma: multiplicative factor of the decay.
        last_epoch: see `LRScheduler`.

    Example:
        >>> # lr = 0.05 for epochs 0-29, 0.005 for 30-59, 0.0005 for 60-89, ...
        >>> sched = StepLR(opt, step_size=30, gamma=0.1)
    """

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        if not isinstance(step_size, numbers.Integral) or isinstance(step_size, bool) or step_size < 1:
            raise ValueError(f"StepLR: step_size must be a positive int (epochs between decays), got {step_size!r}")
        _check_gamma("StepLR", gamma)
        self.step_size = int(step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]


class ExponentialLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every epoch.

    Args:
        optimizer: the optimizer.
        gamma: multiplicative factor of the decay.
        last_epoch: see `LRScheduler`.

    Example:
        >>> sched = ExponentialLR(opt, gamma=0.95)
    """

    def __init__(self, optimizer, gamma, last_epoch=-1):
        _check_gamma("ExponentialLR", gamma)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]


def _check_gamma(name, gamma):
    if not isinstance(gamma, numbers.Real) or isinstance(gamma, bool):
        raise TypeError(f"{name}: gamma must be a number (the decay factor), got {type(gamma).__name__} {gamma!r}")
