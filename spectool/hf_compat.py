"""Keywords that differ across the transformers versions we accept (``>=5.0,<6``).

transformers 5.x renamed a forward's ``past_key_values`` to ``cache`` (the old name warns a
FutureWarning on every forward, in the middle of a user's output). Callers pass the cache under
the name the model's own ``forward`` declares, so no version needs a warnings filter. Public
because the engine (spectool_serving) calls its model the same way.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_keyword", "output_cache"]


def cache_keyword(model: Any) -> str:
    """``"cache"`` where ``model``'s forward takes it, else ``"past_key_values"``.

    A peft wrapper is looked through to its base model (its own forward takes ``**kwargs``).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls: Any = type(base)  # a class is hashable: one signature read per model class
    return _keyword_of(cls)


@functools.cache
def _keyword_of(cls: Any) -> str:
    forward = getattr(cls, "forward", None)
    try:
        params = inspect.signature(forward).parameters if forward is not None else {}
    except (TypeError, ValueError):  # a C-level or otherwise unreadable forward
        params = {}
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned, under whichever name this version gives it."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
