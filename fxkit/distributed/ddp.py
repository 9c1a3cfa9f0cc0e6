"""`DistributedDataParallel`: one model replica per rank, gradients averaged over the ranks in backward.

Each rank runs the same model on its own share of the global batch. At
construction every rank takes rank 0's parameters and buffers, so the
replicas start equal; during each ``backward()`` the gradients are averaged
over the ranks in buckets whose all-reduces overlap the rest of the backward
(`fxkit.distributed.reducer.Reducer`); so after ``backward()`` every rank
holds the gradient of the mean loss over the global batch and any optimizer
keeps the replicas equal. This is PyTorch's DDP, with MPI carrying the
all-reduces.

Example (``fxkit launch -n 4 train.py``):
    >>> dist.init_process_group("mpi")
    >>> model = DistributedDataParallel(Net())
    >>> opt = fxkit.optim.SGD(model.parameters(), lr=0.1)
    >>> for x, y in loader:                      # with a DistributedSampler
    ...     opt.zero_grad()
    ...     F.nll_loss(model(x), y).backward()  # averaged over the 4 ranks on return
    ...     opt.step()
"""
import contextlib

from fxkit.distributed.collectives import broadcast
from fxkit.distributed.process_group import resolve
from fxkit.distributed.reducer import Reducer, average_gradients
from fxkit.errors import DistributedError
from fxkit.runtime.autograd.grad_mode import is_grad_enabled
from fxkit.runtime.nn.module import Module


class DistributedDataParallel(Module):
    """Wrap ``module`` for data-parallel training over the ranks of ``process_group``.

    Args:
        module: the model; the same architecture on every rank.
        device_ids, output_device: accepted for torch compatibility (one device
            per process: move the model before wrapping it).
        broadcast_buffers: copy rank 0's buffers (batch norm statistics) to
            every rank at each forward in training mode, as PyTorch does.
        process_group: the group to average over (the world by default).
        bucket_cap_mb: size of a gradient bucket in MiB.
        find_unused_parameters: parameters a forward does not use are found by
            walking its autograd graph and counted as ready at once; without it
            a parameter without a gradient is an error naming it.
        gradient_as_bucket_view: after a backward each ``.grad`` is a view of
            its bucket instead of a copy, as in PyTorch: no copy out of the
            buckets, and none into them while the gradients stay those views
            (a gradient held across a backward then changes with it).

    Attributes:
        module: the wrapped model (``state_dict`` keys start with ``module.``).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False,
                 gradient_as_bucket_view=False):
        super().__init__()
        if not isinstance(module, Module):
            raise DistributedError(f"DistributedDataParallel wraps an fxkit.nn.Module, got {type(module).__name__}")
        if dim != 0:
            raise DistributedError(f"DistributedDataParallel: dim={dim}: each rank brings its own batch, so there "
                                   f"is no scatter dimension; leave dim at 0")
        self.module = module
        group = resolve(process_group)
        # NOTE: through __dict__: the group and the reducer are no submodules or parameters.
        self.__dict__["process_group"] = group
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True
        self.bucket_cap_mb = bucket_cap_mb
        root = group.ranks[0]
        for _, t in list(module.named_parameters()) + list(module.named_buffers()):
            broadcast(t, root, group)
        params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self.__dict__["reducer"] = Reducer(params, group, int(bucket_cap_mb * 2 ** 20), find_unused_parameters,
                                           gradient_as_bucket_view)

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and self.training:
            for _, b in self.module.named_buffers():
                broadcast(b, self.process_group.ranks[0], self.process_group)
        out = self.module(*args, **kwargs)
        if is_grad_enabled() and self.require_backward_grad_sync:
            self.reducer.prepare(out)
        else:
            self.reducer.expecting = False
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes in this block accumulate gradients locally, with no communication.

        The first backward after the block averages the accumulated sums, so
        ``k - 1`` micro-batches under ``no_sync()`` and one outside equal one
        step on all ``k``.
        """
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def average_gradients(self, grads=None):
        """Average gradients computed outside eager backward over the ranks, bucketed.

        For training through ``fxkit.transforms.grad`` (and ``fxkit.compile`` of
        that graph), whose gradients come back as a dict instead of in ``.grad``.

        Args:
            grads: a dict from parameter names (as ``module.named_parameters()``
                gives them, which is what ``transforms.grad`` returns) to
                gradients, averaged in place; None averages every parameter's
                ``.grad`` in place.

        Returns:
            ``grads`` (or None).
        """
        if grads is None:
            tensors = [p.grad for _, p in self.module.named_parameters() if p.grad is not None]
        else:
            tensors = [grads[name] for name in sorted(grads)]
        average_gradients(tensors, self.process_group, int(self.bucket_cap_mb * 2 ** 20))
        return grads

    def extra_repr(self):
        return (f"ranks={self.process_group.ranks}, buckets={self.reducer.bucket_count}, "
                f"bucket_cap_mb={self.bucket_cap_mb}")
