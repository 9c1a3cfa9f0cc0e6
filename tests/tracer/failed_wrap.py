"""A module whose top level wraps a name it never defines: a failed wrap."""
import fxkit

fxkit.wrap("no_function_of_this_name")
