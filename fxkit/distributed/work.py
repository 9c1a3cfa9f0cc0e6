"""`Work`: the handle of a collective started with ``async_op=True``.

It wraps the MPI request of a non-blocking collective (``Iallreduce``,
``Ibcast``, ...) and what is left to do once the data arrived: dividing for
an average, copying into a non-contiguous or device tensor, splitting a
gathered buffer into the caller's tensors. ``wait()`` polls the request with
the group's deadline (`fxkit.distributed.transport.poll`), answering roll
calls between polls; past the deadline it runs the roll call that names the
lost rank (`ProcessGroup.roll_call`).
"""
from fxkit.distributed.transport import poll
from fxkit.errors import DistributedError


# A wait drives MPI's progress at full speed this long before it backs off to sleeping between tests.
SPIN_SECONDS = 0.05
# A wait first tests this many times back to back, with no clock and no roll calls: a small collective
# completes within them (each test is about 0.2 us of MPI progress), so it costs what a blocking call costs.
QUICK_TESTS = 256


class Work:
    """A collective in flight (``torch.distributed.Work``).

    Example:
        >>> work = fxkit.distributed.all_reduce(t, async_op=True)
        >>> ...                      # compute while the reduction runs
        >>> work.wait()              # t now holds the sum over every rank
    """

    def __init__(self, group, request, what, finish=None, keep=()):
        self._group = group
        self._request = request
        self._what = what
        self._finish = finish
        self._keep = keep  # NOTE: the buffers MPI reads and writes must live until the request completes
        self._done = False

    def is_completed(self):
        """Whether the collective finished (progresses it; never blocks)."""
        if not self._done and self._test():
            self._complete()
        return self._done

    def wait(self, timeout=None):
        """Block until the collective finished and its results are in place; returns True.

        Args:
            timeout: seconds; the group's timeout by default.

        Raises:
            DistributedError: a peer did not join in time (the message names it), or
                another rank reported such a failure.
        """
        if self._done:
            return True
        if self._quick_test():
            self._complete()
            return True
        group = self._group
        group.waiting_on = self._what
        try:
            if not poll(self._test, group.timeout if timeout is None else timeout, group.answer_roll_calls,
                        spin=SPIN_SECONDS):
                group.roll_call(self._what)
        finally:
            group.waiting_on = None
        self._complete()
        return True

    def _quick_test(self):
        try:
            return quick_test(self._request)
        except self._group.MPI.Exception as exc:
            raise mpi_failure(self._group, self._what, exc) from None

    def _test(self):
        try:
            return self._request.Test()
        except self._group.MPI.Exception as exc:
            raise mpi_failure(self._group, self._what, exc) from None

    def _complete(self):
        self._done = True
        if self._finish is not None:
            self._finish()
        self._keep = self._finish = None

    def __repr__(self):
        return f"Work({self._what}, completed={self._done})"


def quick_test(request):
    """Whether ``request`` completed within `QUICK_TESTS` back-to-back tests (bounded: needs no deadline).

    A failed MPI call raises MPI's own exception: the caller names the collective (`mpi_failure`).
    """
    test = request.Test
    for _ in range(QUICK_TESTS):
        if test():
            return True
    return False


def mpi_failure(group, what, exc):
    return DistributedError(f"rank {group.world_rank()}: {what} failed in MPI: {exc.Get_error_string()}; a peer "
                            f"probably died")
