"""The llama.cpp runtime of :class:`~._local.LocalDrafter`: the pinned GGUF, run as shipped.

The transformers runtime dequantizes a GGUF to an HF folder and runs it in fp32 / int8 /
bf16; this one loads the GGUF with ``llama-cpp-python`` (the optional extra
``spectool[llamacpp]``, built from its sdist by ``bash scripts/build_llamacpp.sh``)
and keeps its quantized kernels. Prompts are the same token ids the transformers path builds
(:class:`GGUFTokenizer` renders the GGUF's own chat template the way transformers does);
drafts decode under a GBNF grammar converted from the same JSON schema (:func:`grammar_text`),
and llama.cpp keeps the KV of the longest common prefix between one draft and the next. The
texts go through the same parser as every other drafter's. ``llama_cpp`` is imported only
when a model loads; its errors become spectool errors in :func:`draft_texts` / :func:`load_llama`.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigError, DrafterError
from ._grammar import calls_schema
from ._native import CALL_CLOSE, CALL_OPEN
from ._runtime import require_llama_cpp

__all__ = ["GGUFTokenizer", "LlamaModel", "draft_texts", "gguf_source", "grammar_text", "load_llama"]

#: Context of a loaded model: the native prompt's budget (2048) plus an answer, with room for
#: compact multi-turn prompts. KV at f16 is ~0.1–0.25 GB for the shipped bases.
N_CTX = 8192


def gguf_source(model: Any) -> Path | None:
    """The GGUF a drafter's ``model`` names (embedded, a named model, a ``.gguf`` path), or
    None when it names something llama.cpp cannot load (an HF folder or id, a loaded pair)."""
    from ...embedded import NAMED_MODELS
    from ._loading import _resolve_source

    if isinstance(model, tuple):
        return None
    source = _resolve_source(model)
    if source is None:
        from ...embedded import embedded_gguf

        return embedded_gguf()
    if source in NAMED_MODELS:
        from ...embedded import named_gguf

        return named_gguf(source)
    return Path(source) if source.endswith(".gguf") else None


class GGUFTokenizer:
    """The slice of a transformers tokenizer the prompt builders use, over a loaded GGUF:
    ``chat_template`` from its metadata, rendered with jinja2 as transformers renders it."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama
        meta = getattr(llama, "metadata", {}) or {}
        self.chat_template: str | None = meta.get("tokenizer.chat_template")
        self.bos_token = self._piece(llama.token_bos())
        self.eos_token = self._piece(llama.token_eos())

    def _piece(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._llama.detokenize([token], special=True)).decode("utf-8", "replace")

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        tokenize: bool = False,
        add_generation_prompt: bool = True,
    ) -> str:
        if not self.chat_template:
            raise ConfigError("this GGUF has no chat template")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ConfigError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        ids = self._llama.tokenize(text.encode("utf-8"), add_bos=add_special_tokens, special=True)
        return {"input_ids": list(ids)}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        raw = self._llama.detokenize(list(ids), special=not skip_special_tokens)
        return bytes(raw).decode("utf-8", "replace")


@dataclass
class LlamaModel:
    """A loaded GGUF, its tokenizer shim, the lock that serializes drafts, its grammars."""

    llama: Any
    tokenizer: GGUFTokenizer
    source: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    grammars: OrderedDict[str, Any] = field(default_factory=OrderedDict)

    def grammar(self, text: str) -> Any:
        """The parsed ``LlamaGrammar`` for a GBNF text (an LRU of 32; call under ``lock``)."""
        hit = self.grammars.get(text)
        if hit is None:
            from llama_cpp import LlamaGrammar

            hit = self.grammars[text] = LlamaGrammar.from_string(text, verbose=False)
            while len(self.grammars) > 32:
                self.grammars.popitem(last=False)
        self.grammars.move_to_end(text)
        return hit


_LOADED: dict[tuple[str, int], LlamaModel] = {}
_LOAD_LOCK = threading.Lock()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_llama(gguf: Path, threads: int = 0) -> LlamaModel:
    """Load ``gguf`` once per process (keyed by path and threads; 0 threads: every usable core)."""
    require_llama_cpp()
    threads = threads or _cores()
    key = (str(Path(gguf).resolve()), threads)
    with _LOAD_LOCK:
        if key not in _LOADED:
            try:
                from llama_cpp import Llama

                llama = Llama(
                    model_path=key[0], n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads, verbose=False
                )
            except (ValueError, RuntimeError, OSError) as exc:  # a bad or truncated GGUF
                raise ConfigError(f"llama.cpp cannot load {key[0]}: {exc}") from exc
            _LOADED[key] = LlamaModel(llama, GGUFTokenizer(llama), key[0])
        return _LOADED[key]


def grammar_text(
    tools: Sequence[Mapping[str, Any]], *, native: bool, max_calls: int, max_string_length: int | None
) -> str:
    """GBNF of an answer to ``tools``: the compact JSON array of calls, or (``native``) 1..``max_calls``
    ``<tool_call>\\n{json}\\n</tool_call>`` blocks, from the schema the transformers path compiles."""
    from llama_cpp.llama_grammar import SchemaConverter

    schema = calls_schema(tools, max_string_length=max_string_length, max_calls=max_calls)
    if native:
        schema = {**schema["items"], **({"$defs": schema["$defs"]} if "$defs" in schema else {})}
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "tools"), "call" if native else "")
    rules = converter.format_grammar()
    if not native:
        return rules
    one = f"{json.dumps(CALL_OPEN)} call {json.dumps(CALL_CLOSE)}"
    more = f' ("\\n" {one}){{0,{max_calls - 1}}}' if max_calls > 1 else ""
    return f"root ::= {one}{more}\n{rules}"


def draft_texts(
    model: LlamaModel,
    ids: Sequence[int],
    grammar: str,
    *,
    rows: int,
    temperature: float,
    top_p: float,
    greedy_first: bool,
    max_new_tokens: int,
    reuse: bool,
    stop: threading.Event,
    seed: int = 0,
) -> list[str]:
    """λ = ``rows`` answers to the prompt ``ids`` under ``grammar`` (row 0 greedy with
    ``greedy_first``, the others sampled). Call under ``model.lock``. llama.cpp reuses the KV
    of the prefix it shares with the last draft (``reuse``): later rows and the next turn of a
    conversation prefill only what changed."""
    from llama_cpp import StoppingCriteriaList

    halt = StoppingCriteriaList([lambda _ids, _logits: stop.is_set()])
    texts: list[str] = []
    try:
        parsed = model.grammar(grammar)
        for row in range(rows):
            if stop.is_set():
                break
            if not reuse:
                model.llama.reset()
            greedy = temperature <= 0 or (row == 0 and greedy_first)
            out = model.llama.create_completion(
                list(ids),
                max_tokens=max_new_tokens,
                temperature=0.0 if greedy else temperature,
                top_p=top_p,
                top_k=0,
                min_p=0.0,
                repeat_penalty=1.0,
                seed=seed + row,
                grammar=parsed,
                stopping_criteria=halt,
            )
            texts.append(str(out["choices"][0]["text"]))
    except (ValueError, RuntimeError) as exc:  # context overflow, grammar parse, decode failure
        raise DrafterError(f"llama.cpp drafter failed: {type(exc).__name__}: {exc}") from exc
    return texts
