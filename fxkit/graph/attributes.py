"""Qualified attribute names (``"layer1.0.conv1.weight"``), walked from a module.

``get_attr`` targets and submodule paths name attributes by dotted paths;
passes, the interpreter and the save format read them through `fetch_attr`,
so a missing part is reported the same way everywhere, and `GraphModule` and
passes adding attributes write them through `assign_attr`, so a module is
registered as a submodule, a parameter as a parameter and a tensor as a buffer.
"""
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.tensor import Tensor


def fetch_attr(root, qualname):
    """The attribute at the dotted path ``qualname`` below ``root``.

    Args:
        root: the module (or any object) the path starts from.
        qualname: the dotted path, e.g. ``"layer1.0.conv1.weight"``.

    Raises:
        AttributeError: a part of the path is missing; the message names the
            part, where it was looked for and the whole path.

    Example:
        >>> fetch_attr(model, "layer1.0.conv1.weight").shape
        (64, 64, 3, 3)
    """
    value = root
    walked = []
    for part in qualname.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            where = ".".join(walked) or "the module"
            raise AttributeError(f"{where} has no attribute {part!r} (needed for {qualname!r})") from None
        walked.append(part)
    return value


def assign_attr(root, qualname, value, persistent=True):
    """Set the attribute at the dotted path ``qualname`` below ``root`` to ``value``.

    Missing parents are created as plain `Module`s. A `Module` becomes a
    submodule, a `Parameter` a parameter, another `Tensor` a buffer (saved in
    ``state_dict`` unless ``persistent`` is False); anything else a plain attribute.

    Example:
        >>> assign_attr(gm, "folded.scale", fxkit.ones(8))   # a buffer of a new child module
    """
    *path, field = qualname.split(".")
    for item in path:
        child = root._modules.get(item)
        if child is None:
            child = Module()
            root.add_module(item, child)
        root = child
    if isinstance(value, Module):
        root.add_module(field, value)
    elif isinstance(value, Parameter):
        root.register_parameter(field, value)
    elif isinstance(value, Tensor):
        root.register_buffer(field, value, persistent=persistent)
    else:
        setattr(root, field, value)
