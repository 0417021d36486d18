"""Drafters: propose the tool calls the main model is about to make (the ``Drafter`` protocol).

* :class:`EndpointDrafter`  any OpenAI-compatible endpoint (vLLM serving xLAM-2, gpt-5-nano…)
* :class:`LocalDrafter`     an in-process transformers model, schema-constrained decoding
* :class:`HistoryDrafter`   training-free: n-grams over the session's calls, arguments carried over
* :class:`LearningDrafter`  training-free: plan context and value selection mined from every
                            conversation it drafts for (``"learning"``), or primed with traces
* :class:`CombinedDrafter`  several drafters at once, merged and deduplicated

Every entry point that takes a drafter also takes a name (``"history"``, ``"learning"``,
``"learning:<scope>"``, ``"local"``, ``"tuned"``), resolved by :func:`resolve_drafter`.

Importing this package never imports torch or transformers.
"""

from ._adapter import load_adapter, shipped_adapter_path
from ._combined import CombinedDrafter
from ._common import call_key, tool_schemas
from ._compact import compact_prompt_ids
from ._endpoint import EndpointDrafter
from ._grammar import calls_schema
from ._history import HistoryDrafter
from ._learning import LearningDrafter, learning_drafter
from ._local import DEFAULT_LOCAL_MODEL, LocalDrafter
from ._named import DRAFTER_NAMES, drafter_hint, resolve_drafter
from ._options import LocalDrafterOptions

__all__ = [
    "CombinedDrafter",
    "DEFAULT_LOCAL_MODEL",
    "DRAFTER_NAMES",
    "EndpointDrafter",
    "HistoryDrafter",
    "LearningDrafter",
    "LocalDrafter",
    "LocalDrafterOptions",
    "call_key",
    "calls_schema",
    "compact_prompt_ids",
    "drafter_hint",
    "learning_drafter",
    "load_adapter",
    "resolve_drafter",
    "shipped_adapter_path",
    "tool_schemas",
]
