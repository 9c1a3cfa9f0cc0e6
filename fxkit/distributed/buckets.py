"""`Buckets`: how many gradients are laid out in a few flat buffers, each reduced by one all-reduce.

One all-reduce of 25 MB costs far less than a thousand of 25 kB (PyTorch DDP's
"tensor coalescing"), so small gradients share a flat host buffer of about
``cap_bytes``. A gradient that reaches ``cap_bytes`` by itself gets a bucket
of its own, which can be reduced where it lies instead of through a copy
(Horovod skips its fusion buffer for such tensors the same way).
Buckets are numbered in the order they fill, that is by the position of
their last gradient in ``order``: ranks start the all-reduces in that order
(MPI matches collectives by order), so a bucket that filled early never waits
for one that fills late.
"""
import numpy as np

from fxkit.runtime.tensor import Tensor


def host(array):
    return array if isinstance(array, np.ndarray) else array.get()


class Buckets:
    """Flat buffers holding tensors of ``shapes`` and ``dtypes``, filled in ``order`` (tensor indices).

    Attributes:
        members: per bucket, the tensor indices it holds, in ``order``.
        place: per tensor, ``(bucket, offset)``.
        dtypes: per bucket, its dtype.
        alone: per bucket, whether it holds one tensor of ``cap_bytes`` or more.
    """

    def __init__(self, shapes, dtypes, order, cap_bytes):
        self.shapes = shapes
        sizes = {i: int(np.prod(shapes[i], dtype=np.int64)) for i in order}
        members, open_by_dtype = [], {}
        for i in order:
            dtype = np.dtype(dtypes[i])
            if sizes[i] * dtype.itemsize >= cap_bytes:
                members.append(([i], dtype, True))
                continue
            b = open_by_dtype.get(dtype)
            if b is None:
                b = open_by_dtype[dtype] = len(members)
                members.append(([], dtype, False))
            members[b][0].append(i)
            if sum(sizes[k] for k in members[b][0]) * dtype.itemsize >= cap_bytes:
                del open_by_dtype[dtype]
        position = {i: k for k, i in enumerate(order)}
        members.sort(key=lambda m: position[m[0][-1]])
        self.members = [m for m, _, _ in members]
        self.alone = [alone for _, _, alone in members]
        self.dtypes = [dtype for _, dtype, _ in members]
        self._lengths = [sum(sizes[i] for i in m) for m in self.members]
        self._flats = [None] * len(self.members)
        self.place = {}
        for b, m in enumerate(self.members):
            offset = 0
            for i in m:
                self.place[i] = (b, offset)
                offset += sizes[i]
        self._sizes = sizes

    def __len__(self):
        return len(self.members)

    def flat(self, b):
        """Bucket ``b``'s buffer, allocated on first use (a bucket reduced where its gradient lies needs none)."""
        if self._flats[b] is None:
            self._flats[b] = np.zeros(self._lengths[b], self.dtypes[b])
        return self._flats[b]

    def view(self, i):
        b, offset = self.place[i]
        return self.flat(b)[offset:offset + self._sizes[i]].reshape(self.shapes[i])

    def tensor(self, b):
        return Tensor(self.flat(b))
