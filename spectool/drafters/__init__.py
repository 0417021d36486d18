"""Drafters: propose the tool calls the main model is about to make (the ``Drafter`` protocol).

* :class:`EndpointDrafter`  any OpenAI-compatible endpoint (vLLM serving xLAM-2, gpt-5-nano…)
* :class:`LocalDrafter`     an in-process transformers model, schema-constrained decoding
* :class:`HistoryDrafter`   training-free: n-grams over the session's calls, arguments carried over
* :class:`LearningDrafter`  training-free: plan context and value selection mined from every
                            conversation it drafts for (``"learning"``), or primed with traces
* :class:`CombinedDrafter`  several drafters at once, merged and deduplicated

Every entry point that takes a drafter also takes a name (``"history"``, ``"learning"``,
``"learning:<scope>"``, ``"local"``, ``"tuned"``), resolved by :func:`resolve_drafter`.

Its folders: ``local/`` (LocalDrafter: loading, prompts, grammar, decoding), ``history/`` (the
training-free drafters and their mining), ``tune/`` (LoRA tuning, ``spectool drafters tune``); what
several of them use sits beside them here. Importing this package never imports torch or transformers.
"""

from ._combined import CombinedDrafter
from ._common import call_key, tool_schemas
from ._endpoint import EndpointDrafter
from ._named import DRAFTER_NAMES, drafter_hint, resolve_drafter
from .history._history import HistoryDrafter
from .history._learning import LearningDrafter, learning_drafter
from .local._adapter import load_adapter, shipped_adapter_path
from .local._compact import compact_prompt_ids
from .local._grammar import calls_schema
from .local._local import DEFAULT_LOCAL_MODEL, LocalDrafter
from .local._options import LocalDrafterOptions

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
