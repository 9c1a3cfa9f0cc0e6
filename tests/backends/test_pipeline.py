"""`Pipeline`: stages on devices with micro-batches give the unsplit model's outputs and gradients.

Exactness with micro-batches: every zoo model (eval mode) treats samples
independently, so the pipeline's output equals the unsplit model run on the
same micro-batches bit for bit. Against the unsplit model on the whole batch
it agrees to 1e-6 of the largest output: BLAS blocks a matmul of 2 rows
differently from one of 1 row, which changes the last bit of some sums.
"""
import copy

import numpy as np
import pytest

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.backends.microbatch import join_batches, split_batch
from fxkit.backends.pipeline import Pipeline, stage_schedule
from fxkit.errors import DeviceError, PipelineError, ShapeError
from fxkit.nn import functional as F
from fxkit.transforms.split_pipeline import split_pipeline
from tests.conftest import HAS_CUDA
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import assert_close, zoo_model, zoo_params


def flat(value):
    return list(value) if isinstance(value, tuple) else [value]


def assert_whole_batch_close(actual, expected):
    for a, e in zip(flat(actual), flat(expected)):
        scale = float(np.abs(e.numpy()).max())
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-6, atol=1e-6 * scale)


@pytest.mark.parametrize("name", zoo_params())
@pytest.mark.parametrize("k", [2, 3, 4])
def test_zoo_pipeline_matches_the_unsplit_model(name, k):
    model, inputs = zoo_model(name)
    parent = split_pipeline(model, inputs, n_stages=k, verbose=False)
    expected = model(*inputs)
    assert_same(Pipeline(parent, chunks=1)(*inputs), expected, f"{name}, {k} stages, 1 micro-batch")
    if inputs[0].shape[0] < 2:
        return
    out = Pipeline(parent, chunks=2)(*inputs)
    per_micro_batch = join_batches([model(*b) for b in split_batch(list(inputs), 2)])
    assert_same(out, per_micro_batch, f"{name}, {k} stages, 2 micro-batches")
    assert_whole_batch_close(out, expected)


def test_uneven_micro_batches_and_more_chunks_than_stages():
    model, _ = zoo_model("lenet")
    x = fxkit.randn(7, 1, 28, 28)
    parent = split_pipeline(model, [x], n_stages=3, verbose=False)
    out = Pipeline(parent, chunks=5)(x)
    assert out.shape == (7, 10)
    assert_same(out, join_batches([model(*b) for b in split_batch([x], 5)]))


class Half(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.fc(x).relu()


def test_a_list_of_modules_is_chained_like_the_seed_talks_sub_nets():
    fxkit.manual_seed(0)
    sub_net1, sub_net2 = Half(16, 32), Half(32, 4)
    x = fxkit.randn(8, 16)
    out = Pipeline([sub_net1, sub_net2], devices=["cpu", "cpu"], chunks=4)(x)
    assert_same(out, join_batches([sub_net2(sub_net1(b[0])) for b in split_batch([x], 4)]))


def test_stage_failures_name_the_stage_and_micro_batch_and_do_not_hang():
    class Fails(nn.Module):
        def forward(self, x):
            if x.shape[0] < 3:
                raise ValueError("this micro-batch is too small")
            return x

    x = fxkit.randn(5, 4)
    with pytest.raises(PipelineError, match=r"Pipeline stage 1 on cpu, forward of micro-batch 1: this micro-batch"):
        Pipeline([Half(4, 4), Fails(), Half(4, 4)], chunks=2)(x)


def test_bad_setups_are_explained():
    model, inputs = zoo_model("mlp")
    parent = split_pipeline(model, inputs, n_stages=2, verbose=False)
    with pytest.raises(DeviceError, match=r"2 stages need 2 devices, got 3"):
        Pipeline(parent, devices=["cpu"] * 3)
    with pytest.raises(PipelineError, match=r"chunks is the number of micro-batches, a positive int; got 0"):
        Pipeline(parent, chunks=0)
    with pytest.raises(ShapeError, match=r"a batch of 2 samples cannot be split into 3 micro-batches"):
        Pipeline(parent, chunks=3)(*inputs)
    with pytest.raises(ShapeError, match=r"batch sizes \(dimension 0\) differ: \[2, 3\]"):
        Pipeline([Half(4, 4)], chunks=2)(fxkit.randn(2, 4), fxkit.randn(3, 4))


def test_a_batch_reduction_cannot_be_joined_from_micro_batches():
    class Mean(nn.Module):
        def forward(self, x):
            return x.mean()

    with pytest.raises(ShapeError, match=r"returns a 0-d tensor.*use chunks=1"):
        Pipeline([Mean()], chunks=2)(fxkit.randn(4, 3))


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("k,m", [(1, 3), (2, 1), (3, 4), (4, 8), (4, 2)])
def test_training_schedules_run_each_step_once_in_a_valid_order(kind, k, m):
    for s in range(k):
        steps = stage_schedule(kind, s, k, m)
        assert sorted(steps) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
        in_flight, most = 0, 0
        for direction, j in steps:
            if direction == "B":
                assert ("F", j) in steps[:steps.index(("B", j))]
            in_flight += 1 if direction == "F" else -1
            most = max(most, in_flight)
        if kind == "1f1b":
            assert most <= min(k - s, m), f"stage {s} holds {most} micro-batches"


def grads_of(module):
    return {name.split(".", 1)[1]: p.grad.numpy().copy() for name, p in module.named_parameters()}


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("name,k,m", [("mlp", 3, 4), ("lenet", 2, 3), ("digits_net", 4, 4)])
def test_training_accumulates_the_whole_batch_gradients(name, k, m, schedule):
    fxkit.manual_seed(1)
    model, shapes = fxkit.models.get(name)
    rng = np.random.default_rng(0)
    x = fxkit.from_numpy(rng.standard_normal((8, *shapes[0][1:])).astype(np.float32))
    y = fxkit.from_numpy(rng.integers(0, 10, 8))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    expected = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    parent = split_pipeline(model, [x], n_stages=k, verbose=False)
    got = Pipeline(parent, chunks=m).train_step([x], y, F.cross_entropy, schedule=schedule)
    assert got == pytest.approx(loss.item(), rel=1e-6)
    grads = grads_of(parent)
    assert sorted(grads) == sorted(expected)
    for key, g in expected.items():
        np.testing.assert_allclose(grads[key], g, rtol=1e-4, atol=1e-6, err_msg=key)


def test_training_a_model_with_skip_connections_across_stages():
    fxkit.manual_seed(2)
    model, _ = fxkit.models.get("resnet18", num_classes=5)
    x = fxkit.randn(4, 3, 32, 32)
    y = fxkit.tensor([0, 3, 1, 4])
    F.cross_entropy(model(x), y).backward()
    expected = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    parent = split_pipeline(model, [x], n_stages=3, verbose=False)
    Pipeline(parent, chunks=1).train_step([x], y, F.cross_entropy)
    for key, g in grads_of(parent).items():
        np.testing.assert_allclose(g, expected[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_train_step_needs_a_scalar_loss():
    with pytest.raises(PipelineError, match=r"loss_fn must return a 0-d tensor"):
        Pipeline([Half(4, 4)], chunks=2).train_step([fxkit.randn(4, 4)], fxkit.randn(4, 4), lambda o, t: o - t)
    with pytest.raises(PipelineError, match=r"schedule='zigzag' is not one of gpipe, 1f1b"):
        Pipeline([Half(4, 4)]).train_step([fxkit.randn(4, 4)], fxkit.randn(4, 4), F.mse_loss, schedule="zigzag")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU with cupy")
@pytest.mark.parametrize("name", ["lenet", "resnet18", "transformer_block"])
def test_two_stages_on_gpus_equal_the_cpu_run(name):
    model, inputs = zoo_model(name)
    parent = split_pipeline(model, inputs, n_stages=2, verbose=False)
    expected = Pipeline(parent, chunks=2)(*inputs)
    gpus = fxkit.cuda.device_count()
    devices = ["cuda:0", "cuda:1" if gpus > 1 else "cuda:0"]
    # NOTE: the pipeline moves its stages' modules; the zoo model they share stays on the cpu.
    out = Pipeline(copy.deepcopy(parent), devices=devices, chunks=2)(*inputs)
    assert all(t.device == fxkit.Device(devices[-1]) for t in flat(out))
    assert_close(tuple(t.cpu() for t in flat(out)), tuple(flat(expected)), rtol=1e-6, atol=1e-6)
