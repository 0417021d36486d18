"""Loading a local drafter's model once per process: source, dtype, adapter, its grammar.

A model is keyed by (source, dtype, adapter) and shared by every drafter that names the same
three; :class:`LocalModel` carries the lock that serializes drafts on it, the grammar compiled
for its tokenizer and the KV cache of the last prompt drafted on it. torch, transformers and
peft are imported only inside the functions that need them.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ._decode import PrefixCache

__all__ = [
    "COMPILER",
    "DEFAULT_LOCAL_MODEL",
    "LocalModel",
    "adapter_format",
    "eos_ids",
    "load_shared",
    "output_width",
    "with_adapter",
]

#: The model the paper drafts with; used when its weights are reachable (hub cache / folder).
DEFAULT_LOCAL_MODEL = "Salesforce/xLAM-2-1b-fc-r"


@dataclass
class LocalModel:
    """A loaded model + tokenizer, its grammar, and the lock that serializes generation."""

    model: Any
    tokenizer: Any
    source: str
    grammar: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: KV cache of the last prompt drafted on this model (guarded by ``lock``).
    prefix: PrefixCache = field(default_factory=PrefixCache)
    _grammar_lock: threading.Lock = field(default_factory=threading.Lock)

    def constraint(self, max_string_length: int | None, max_calls: int) -> Any:
        with self._grammar_lock:
            if self.grammar is None or (self.grammar.max_string_length, self.grammar.max_calls) != (
                max_string_length,
                max_calls,
            ):
                from ._grammar import GrammarConstraint

                vocab = output_width(self.model)
                self.grammar = GrammarConstraint(
                    self.tokenizer, vocab, max_string_length=max_string_length, max_calls=max_calls
                )
            return self.grammar


_LOADED: dict[tuple[str, str, str], LocalModel] = {}
#: Compiles a new tool set's grammar while the drafting thread prefills (cached per tool set).
COMPILER = ThreadPoolExecutor(1, thread_name_prefix="spectool-grammar")
_LOAD_LOCK = threading.Lock()


def _resolve_source(model: str | os.PathLike[str] | None) -> str | None:
    """None/"embedded" → the embedded SmolLM2; the xLAM default only when it is on disk."""
    if model is None or str(model) in ("", "embedded"):
        return None
    if str(model) == DEFAULT_LOCAL_MODEL and not _hub_cached(DEFAULT_LOCAL_MODEL):
        return None
    return str(model)


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def load_shared(
    model: str | os.PathLike[str] | None,
    dtype: str = "auto",
    adapter: str | os.PathLike[str] | None = None,
) -> LocalModel:
    """Load a model once per process (keyed by source, dtype and adapter) and share it.

    ``dtype`` is one of :data:`~._quant.DTYPES`; ``"int8"`` (what ``"auto"`` picks on CPUs
    with a quantized engine) loads fp32, merges the adapter, then quantizes the linear layers.
    """
    from ._quant import DTYPES, quantize_int8, resolve_dtype

    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    dtype = resolve_dtype(dtype)
    source = _resolve_source(model)
    key = (source or "embedded", dtype, os.fspath(adapter) if adapter is not None else "")
    with _LOAD_LOCK:
        if key not in _LOADED:
            from ...embedded import load_causal_lm

            try:
                m, tok = load_causal_lm(source, dtype="float32" if dtype == "int8" else dtype)
            except ConfigError:
                raise
            except Exception as exc:  # OSError, ValueError from transformers: a bad source
                raise ConfigError(f"cannot load local drafter model {key[0]!r}: {exc}") from exc
            if adapter is not None:
                m = with_adapter(m, adapter)
            if dtype == "int8":
                m = quantize_int8(m)
            _LOADED[key] = LocalModel(m, tok, key[0] + (f"+{key[2]}" if key[2] else ""))
        return _LOADED[key]


def eos_ids(loaded: LocalModel) -> list[int]:
    """The model's end tokens: its generation config's and its tokenizer's."""
    found: set[int] = set()
    for value in (
        getattr(getattr(loaded.model, "generation_config", None), "eos_token_id", None),
        loaded.tokenizer.eos_token_id,
    ):
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, (list, tuple)):
            found.update(int(v) for v in value)
    return sorted(found)


def output_width(model: Any) -> int:
    """Logits per position: the output layer's width (an int8 layer has no ``.weight`` tensor)."""
    head = model.get_output_embeddings()
    width = getattr(head, "out_features", None)
    return int(width) if width is not None else int(head.weight.shape[0])


def adapter_format(adapter: str | os.PathLike[str]) -> int:
    """The compact format version ``adapter`` was tuned on: the drafter must render in it."""
    from ._adapter import adapter_manifest
    from ._compact import COMPACT_FORMAT_VERSION, COMPACT_FORMAT_VERSIONS

    version = adapter_manifest(adapter).get("compact_format_version", COMPACT_FORMAT_VERSION)
    if version not in COMPACT_FORMAT_VERSIONS:
        raise ConfigError(
            f"adapter {os.fspath(adapter)} was tuned on compact format {version!r}; this spectool "
            f"renders {COMPACT_FORMAT_VERSIONS}: retune it (spectool drafters tune)"
        )
    return int(version)


def with_adapter(model: Any, adapter: str | os.PathLike[str]) -> Any:
    """The model with a tuned adapter loaded (peft is imported only here, through _adapter)."""
    from ._adapter import load_adapter  # type: ignore[import-not-found, unused-ignore]

    loaded = load_adapter(model, adapter)
    return model if loaded is None else loaded
