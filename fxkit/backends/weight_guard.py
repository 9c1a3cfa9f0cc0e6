"""`WeightGuard`: keeps a compiled specialisation true to the parameters it reads after they change.

Generated code reads the raw arrays of the parameters and buffers captured
when it was compiled, and values computed from them once: constant
sub-graphs folded by `FoldConstants` (``w.t()``, a parameter times a
constant), conv weights the numba backend packs. Training writes the
parameters in place (an optimizer step); ``load_state_dict(assign=True)``
and ``_apply`` rebind their arrays. Without a guard the compiled module
would go on computing with the old values, silently.

The check costs one integer comparison per call: `WRITES` counts every
in-place write into any tensor. Only when it moved does the guard look
closer: a tensor rebound to another array, or (for a backend that copied
the weights away, such as the onnxruntime delegate) a tensor written at
all, makes the specialisation stale, and `fxkit.compile` compiles it again;
otherwise folded constants whose sources were written are recomputed in
place, where the generated code reads them (packed conv weights follow
`WRITES` themselves, see `fxkit.backends.conv_lowering`).
"""
from fxkit.runtime.autograd.autograd_meta import WRITES, write_count


class WeightGuard:
    """What one specialisation read from its module, and how to bring it up to date.

    Args:
        gm: the specialisation's module after the backend's passes.
        origin: the module it was compiled from (its tensors may have been
            folded into new ones, as batch norms into convolutions).
        live: whether the generated code reads the tensors' arrays themselves
            (numpy, numba, cupy) rather than copies of them.
    """

    def __init__(self, gm, origin, live):
        recipes = gm.__dict__.get("folded_constants", ())
        # NOTE: every tensor of the module trees, not only the graph's get_attrs: a delegate's partitions
        # are child modules whose weights the top graph never names.
        read = {id(t) for t in (*gm.parameters(), *gm.buffers())}
        refreshable = {id(t) for recipe in recipes for t in recipe.sources.values()}
        tensors = {id(t): t for t in (*origin.parameters(), *origin.buffers(), *gm.parameters(), *gm.buffers())}
        self._watched = [(t, t._data, write_count(t), live and (key in read or key in refreshable))
                         for key, t in tensors.items()]
        self._recipes = recipes
        self.writes = WRITES[0]

    def refresh(self):
        """Bring the specialisation up to date after writes; False when it must be compiled again.

        Stale: a tensor rebound to another array, or one written in place that
        the code reads only through a copy (a delegate's session, a weight a
        batch norm was folded into). A tensor without autograd state keeps no
        count of writes, and only its rebinding is seen.
        """
        for tensor, array, version, followed in self._watched:
            if tensor._data is not array:
                return False
            if not followed and version is not None and write_count(tensor) != version:
                return False
        for recipe in self._recipes:
            recipe.refresh()
        self.writes = WRITES[0]
        return True
