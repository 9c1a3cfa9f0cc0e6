"""A module that wraps the builtins ``len`` and ``getattr`` (torch.fx's ``wrap("len")``)."""
import fxkit

fxkit.wrap("len")
fxkit.wrap("getattr")


def scaled_by_length(x):
    return x * len(x)


def transposed_by_name(x):
    return getattr(x, "T")


def length_of_list(items):
    return len(items)
