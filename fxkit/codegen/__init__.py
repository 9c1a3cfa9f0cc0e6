"""Code generation: graph nodes to Python source (through ``ast``) and, for
backends, to kernel source. Reads nodes without importing `fxkit.graph`."""
from fxkit.codegen.namespace import Namespace, sanitize
from fxkit.codegen.python import PythonCode, generate_forward

__all__ = ["Namespace", "PythonCode", "generate_forward", "sanitize"]
