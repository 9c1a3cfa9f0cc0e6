"""The user's source line of a traced operation, found by walking frames.

Every node the tracer records carries ``meta["stack"]``: the first frame
outside fxkit's machinery (runtime dispatch, nn containers, tracer, graph,
codegen). The model zoo (``fxkit/models``) counts as user code, so its nodes
point at the zoo's ``forward`` lines. Walking ``sys._getframe`` costs a few
attribute reads a frame; ``inspect.stack()`` would read every source file on
the stack for every node.
"""
import linecache
import os
import sys

from fxkit.graph.node import SourceLocation

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the fxkit folder
_INTERNAL = tuple(os.path.join(_PACKAGE, part) + os.sep
                  for part in ("runtime", "tracer", "graph", "codegen", "nn"))


def _is_internal(code):
    return code.co_filename.startswith(_INTERNAL)


def user_location(depth=1):
    """The `SourceLocation` of the innermost frame outside fxkit's machinery.

    Args:
        depth: frames to skip above the caller before looking (1 = the caller's caller).

    Returns:
        The `SourceLocation` (file, line number, function, source line), or None when every frame on the stack is internal.
    """
    frame = sys._getframe(depth + 1)
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code):
            line = frame.f_lineno
            return SourceLocation(code.co_filename, line, code.co_name,
                                  linecache.getline(code.co_filename, line).strip())
        frame = frame.f_back
    return None
