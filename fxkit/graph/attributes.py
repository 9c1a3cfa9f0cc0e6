"""Qualified attribute names (``"layer1.0.conv1.weight"``), walked from a module.

``get_attr`` targets and submodule paths name attributes by dotted paths;
passes, the interpreter and the save format all read them through
`fetch_attr`, so a missing part is reported the same way everywhere.
"""


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
