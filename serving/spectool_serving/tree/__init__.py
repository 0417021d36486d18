"""Training-free tree speculative decoding for the engine: UniSpec drafting, CAST trees,
the decoding policy the engine drafts ordinary text with."""

from .accept import greedy_tree_accept
from .gate import DraftGate
from .policy import DecodingPolicy, PolicyStats
from .suffix import SuffixIndex
from .tree import DraftTree, ancestor_matrix
from .unispec import ContextIndex, NGramStore, TopG, TreeDrafter
from .verifier import TreeVerifier

__all__ = [
    "ContextIndex",
    "DecodingPolicy",
    "DraftGate",
    "DraftTree",
    "NGramStore",
    "PolicyStats",
    "SuffixIndex",
    "TopG",
    "TreeDrafter",
    "TreeVerifier",
    "ancestor_matrix",
    "greedy_tree_accept",
]
