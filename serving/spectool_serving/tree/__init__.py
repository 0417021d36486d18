"""Training-free tree speculative decoding: UniSpec drafting, calibration, CAST trees."""

from .accept import greedy_tree_accept, recursive_rejection, sample_tree_accept
from .decode import POLICIES, DecodeResult, decode, make_drafter
from .forward import TreeState, build_mask, commit_paths, prefill, tree_forward
from .tree import DraftTree, ancestor_matrix, pad_trees
from .unispec import ContextIndex, NGramStore, TopG, TreeDrafter

__all__ = [
    "POLICIES",
    "ContextIndex",
    "DecodeResult",
    "DraftTree",
    "NGramStore",
    "TopG",
    "TreeDrafter",
    "TreeState",
    "ancestor_matrix",
    "build_mask",
    "commit_paths",
    "decode",
    "greedy_tree_accept",
    "make_drafter",
    "pad_trees",
    "prefill",
    "recursive_rejection",
    "sample_tree_accept",
    "tree_forward",
]
