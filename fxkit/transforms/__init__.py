"""Passes over `GraphModule`s: the pass infrastructure, shape propagation and
inference, the cost model, cleanup, pattern rewriting and elementwise fusion.

Every pass is a callable ``GraphModule -> GraphModule``; `PassManager` runs a
list of them, linting and checking outputs after each.
"""
from fxkit.transforms.pass_base import Pass, pass_name
from fxkit.transforms.pass_manager import PassManager, PassRecord

__all__ = ["Pass", "PassManager", "PassRecord", "pass_name"]
