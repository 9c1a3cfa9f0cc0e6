"""The list and dict a node's arguments are stored as: mutating them raises.

A node's ``users`` are kept in step with its ``args``/``kwargs`` by the
setters of `Node`; ``cat.args[0].append(neg)`` would slip past them, leave
``neg`` without its user and let dead-code elimination erase a node that is
still read. torch.fx stores arguments as ``immutable_list``/``immutable_dict``
for the same reason; these are fxkit's. They are real ``list``/``dict``
subclasses, so ``isinstance`` checks, indexing, iteration and equality work
unchanged, and they pickle and copy as plain containers rebuilt immutable.
"""
import copy

from fxkit.errors import GraphError

_HOW = ("a node's arguments are immutable so its users stay in step; assign a new value with "
        "node.args = (...) / node.kwargs = {...}, or use node.update_arg(i, value), "
        "node.update_kwarg(key, value) or node.replace_input_with(old, new)")


def _refuse(self, *args, **kwargs):
    raise GraphError(f"cannot change {type(self).__name__} {self!r} in place: {_HOW}")


class ImmutableList(list):
    """A node argument's list: reads like a list, refuses ``append``, ``x[i] = ...``, ..."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __hash__(self):
        return hash(tuple(self))

    def __reduce__(self):
        return (ImmutableList, (list(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return ImmutableList(copy.deepcopy(list(self), memo))


class ImmutableDict(dict):
    """A node argument's dict: reads like a dict, refuses ``d[k] = ...``, ``update``, ..."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __hash__(self):
        return hash(tuple(self.items()))

    def __reduce__(self):
        return (ImmutableDict, (dict(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return ImmutableDict(copy.deepcopy(dict(self), memo))


def freeze(value):
    """``value`` with every list and dict (nested in tuples, lists, dicts, slices) made immutable."""
    kind = type(value)
    if kind is tuple:
        return tuple([freeze(v) for v in value])
    if kind is list or kind is ImmutableList:
        return ImmutableList([freeze(v) for v in value])
    if kind is dict or kind is ImmutableDict:
        return ImmutableDict({k: freeze(v) for k, v in value.items()})
    if kind is slice:
        return slice(freeze(value.start), freeze(value.stop), freeze(value.step))
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return kind(*[freeze(v) for v in value])
    return value
