"""Passes over `GraphModule`s: the pass infrastructure, shape propagation and
inference, the cost model, cleanup, pattern rewriting and elementwise fusion.

Every pass is a callable ``GraphModule -> GraphModule``; `PassManager` runs a
list of them, linting and checking outputs after each.
"""
from fxkit.transforms.pass_base import Pass, pass_name
from fxkit.transforms.pass_manager import PassManager, PassRecord, this_before_that_pass_constraint
from fxkit.transforms.shape_prop import ShapeProp
from fxkit.transforms.symbolic import Sym
from fxkit.transforms.infer_shapes import infer_shapes
from fxkit.transforms.cost import Cost, estimate_cost
from fxkit.transforms.cse import EliminateCommonSubexpressions, eliminate_common_subexpressions
from fxkit.transforms.dead_code import EliminateDeadCode, eliminate_dead_code
from fxkit.transforms.fold_constants import FoldConstants, fold_constants
from fxkit.transforms.fold_conv_bn import FoldConvBN, fold_conv_bn
from fxkit.transforms.fuse_elementwise import FuseElementwise, fuse_elementwise
from fxkit.transforms.fused_op import FusedOp
from fxkit.transforms.remove_dropout import RemoveDropout, remove_dropout
from fxkit.transforms.replace_pattern import replace_pattern, replace_pattern_with_filters
from fxkit.transforms.subgraph_matcher import Match, SubgraphMatcher
from fxkit.transforms.split_module import split_module
from fxkit.transforms.split_by_tags import split_by_tags
from fxkit.transforms.partition import partition_by_support
from fxkit.transforms.split_pipeline import StageStats, split_pipeline
from fxkit.transforms.stage_chain import StageChain
from fxkit.transforms.grad import grad
from fxkit.transforms import quantize  # noqa: E402  (fxkit.transforms.quantize: prepare, calibrate, convert)

__all__ = ["Pass", "PassManager", "PassRecord", "pass_name", "this_before_that_pass_constraint",
           "ShapeProp", "Sym", "infer_shapes", "Cost", "estimate_cost",
           "EliminateCommonSubexpressions", "EliminateDeadCode", "FoldConstants", "FoldConvBN", "FuseElementwise",
           "FusedOp", "Match",
           "RemoveDropout", "SubgraphMatcher", "eliminate_common_subexpressions", "eliminate_dead_code",
           "fold_constants", "fold_conv_bn", "fuse_elementwise", "remove_dropout", "replace_pattern",
           "replace_pattern_with_filters", "StageChain", "StageStats", "partition_by_support", "split_by_tags",
           "split_module", "split_pipeline", "grad"]
