"""StepLR and ExponentialLR: the same learning-rate sequences as torch.optim.lr_scheduler."""
import warnings

import pytest

import fxkit
from fxkit import nn
from fxkit.optim import SGD
from fxkit.optim.lr_scheduler import ExponentialLR, LRScheduler, StepLR

SCHEDULES = {
    "step": ("StepLR", {"step_size": 3, "gamma": 0.5}),
    "step_default_gamma": ("StepLR", {"step_size": 2}),
    "exponential": ("ExponentialLR", {"gamma": 0.9}),
}


def _fx_optimizer(lrs=(0.1, 0.03)):
    return SGD([{"params": [nn.Parameter(fxkit.ones(2))], "lr": lr} for lr in lrs], lr=0.1)


def _sequence(optimizer, scheduler, epochs):
    """The learning rates of every group, epoch after epoch, flattened."""
    out = list(scheduler.get_last_lr())
    for _ in range(epochs):
        optimizer.step()
        scheduler.step()
        out.extend(scheduler.get_last_lr())
    return out


@pytest.mark.parametrize("name, kwargs", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_schedule_matches_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    fx_opt = _fx_optimizer()
    th_opt = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.ones(2))], "lr": lr} for lr in (0.1, 0.03)],
                             lr=0.1)
    fx_sched = getattr(fxkit.optim.lr_scheduler, name)(fx_opt, **kwargs)
    th_sched = getattr(torch.optim.lr_scheduler, name)(th_opt, **kwargs)
    got, want = _sequence(fx_opt, fx_sched, 12), _sequence(th_opt, th_sched, 12)
    assert got == pytest.approx(want, rel=1e-12)
    assert [g["lr"] for g in fx_opt.param_groups] == pytest.approx([g["lr"] for g in th_opt.param_groups])
    assert [g["initial_lr"] for g in fx_opt.param_groups] == [0.1, 0.03]


def test_step_lr_closed_values():
    opt = _fx_optimizer((1.0,))
    lrs = _sequence(opt, StepLR(opt, step_size=2, gamma=0.1), 5)
    assert lrs == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


def test_state_dict_round_trip_resumes_the_schedule():
    opt = _fx_optimizer()
    sched = ExponentialLR(opt, gamma=0.8)
    _sequence(opt, sched, 4)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    assert "optimizer" not in saved_sched and saved_sched["last_epoch"] == 4
    rest = _sequence(opt, sched, 3)

    opt2 = _fx_optimizer((0.5, 0.5))
    sched2 = ExponentialLR(opt2, gamma=0.8)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    assert _sequence(opt2, sched2, 3) == pytest.approx(rest)


def test_resuming_with_last_epoch_needs_initial_lr():
    opt = _fx_optimizer()
    with pytest.raises(KeyError, match=r"'initial_lr' is not specified in param_groups\[0\] when resuming a "
                                       r"scheduler with last_epoch=3"):
        StepLR(opt, step_size=2, last_epoch=3)


def test_scheduler_stepped_before_optimizer_warns():
    opt = _fx_optimizer()
    sched = ExponentialLR(opt, gamma=0.5)
    with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step\(\)"):
        sched.step()
    opt2 = _fx_optimizer()
    sched2 = ExponentialLR(opt2, gamma=0.5)
    opt2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched2.step()


def test_bad_arguments_are_clear():
    opt = _fx_optimizer()
    with pytest.raises(ValueError, match="step_size must be a positive int .* got 0"):
        StepLR(opt, step_size=0)
    with pytest.raises(TypeError, match="ExponentialLR: gamma must be a number .* got str"):
        ExponentialLR(opt, gamma="0.9")
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        ExponentialLR([], gamma=0.9)
    with pytest.raises(TypeError, match="abstract"):
        LRScheduler(opt)


def test_custom_scheduler_subclass():
    class Halve(LRScheduler):
        def get_lr(self):
            if self._is_initial:
                return [g["lr"] for g in self.optimizer.param_groups]
            return [base / 2 ** self.last_epoch for base in self.base_lrs]

    opt = _fx_optimizer((0.8,))
    assert _sequence(opt, Halve(opt), 3) == pytest.approx([0.8, 0.4, 0.2, 0.1])
