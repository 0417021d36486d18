"""Training-free tree speculative decoding: UniSpec drafting, calibration, CAST trees."""

from .accept import greedy_tree_accept, recursive_rejection, sample_tree_accept
from .decode import POLICIES, DecodeResult, decode, make_drafter
from .gate import DraftGate
from .suffix import SuffixIndex
from .tree import DraftTree, ancestor_matrix, pad_trees
from .unispec import ContextIndex, NGramStore, TopG, TreeDrafter
from .verifier import TreeVerifier

__all__ = [
    "POLICIES",
    "ContextIndex",
    "DecodeResult",
    "DraftGate",
    "DraftTree",
    "NGramStore",
    "SuffixIndex",
    "TopG",
    "TreeDrafter",
    "TreeVerifier",
    "ancestor_matrix",
    "decode",
    "greedy_tree_accept",
    "make_drafter",
    "pad_trees",
    "recursive_rejection",
    "sample_tree_accept",
]
