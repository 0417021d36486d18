"""Drafters: propose the tool calls the main model is about to make (the ``Drafter`` protocol).

* :class:`EndpointDrafter`  any OpenAI-compatible endpoint (vLLM serving xLAM-2, gpt-5-nano…)
* :class:`LocalDrafter`     an in-process transformers model, schema-constrained decoding
* :class:`HistoryDrafter`   training-free: n-grams over the session's calls, arguments carried over
* :class:`CombinedDrafter`  several drafters at once, merged and deduplicated

Importing this package never imports torch or transformers.
"""

from ._adapter import load_adapter, shipped_adapter_path
from ._combined import CombinedDrafter
from ._endpoint import EndpointDrafter
from ._grammar import calls_schema
from ._history import HistoryDrafter
from ._local import DEFAULT_LOCAL_MODEL, LocalDrafter
from ._options import LocalDrafterOptions

__all__ = [
    "CombinedDrafter",
    "DEFAULT_LOCAL_MODEL",
    "EndpointDrafter",
    "HistoryDrafter",
    "LocalDrafter",
    "LocalDrafterOptions",
    "calls_schema",
    "load_adapter",
    "shipped_adapter_path",
]
