"""LocalDrafter: an in-process transformers model drafts tool calls.

The request is rendered as the compact prompt of :mod:`._compact` (candidate tools' signatures
and recent messages, the format a tuned adapter learns) or, with ``prompt="native"``, through
the model's own chat template with ``tools=`` (:mod:`._native`: Qwen's ``<tool_call>`` format).
Rows decode under a grammar of the offered tools with :mod:`._decode` (prefix KV reuse,
jump-forward over schema-forced tokens, early stop; λ rows as forks of the greedy row or as
samples) or :mod:`._beam` (a beam of width λ: distinct guesses by sequence log-probability).
A confidence gate drops a draft whose best row is unlikely. With ``runtime="llama.cpp"``
(:mod:`._runtime` chooses) the GGUF runs as shipped through llama-cpp-python (:mod:`._llamacpp`):
same prompt ids, the same schema as a GBNF grammar, the same parser. Generation runs in a worker thread,
serialized per model, and stops at its next forward when the caller is cancelled (the
speculator's timeout). How it drafts is one :class:`~._options.LocalDrafterOptions`.
With ``choose_values`` the grammar admits, for each parameter the mined flows say is copied,
only value selection's candidates (:mod:`._choices`): the model chooses instead of writing.
torch/transformers load lazily; tuning (:mod:`._tune`) is never imported here.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..._types import DraftRequest, ToolCall
from ...errors import ConfigError, DrafterError
from ...toolcall_text import salvage_tool_calls
from .._common import call_key, tool_schemas, with_known_tools
from ._copy import CopyBias, source_text, token_table
from ._decode import DecodeInputs, DecodeStats, decode_rows
from ._loading import (
    COMPILER,
    DEFAULT_LOCAL_MODEL,
    LocalModel,
    adapter_format,
    eos_ids,
    load_shared,
    output_width,
    with_adapter,
)
from ._options import LocalDrafterOptions, from_keywords
from ._runtime import choose_runtime

if TYPE_CHECKING:
    from ..history._learning import LearningDrafter
    from ._llamacpp import LlamaModel

__all__ = ["DEFAULT_LOCAL_MODEL", "LocalDrafter", "LocalModel"]


class LocalDrafter:
    """Drafts calls with an in-process causal LM (default: xLAM-2-1b if cached, else SmolLM2).

    ``model``: None/"embedded", a name of :data:`spectool.embedded.NAMED_MODELS`
    (``"qwen2.5-coder-0.5b"`` …), an HF id or folder, a ``.gguf`` path, or a loaded
    ``(model, tokenizer)`` pair. ``options``: a :class:`LocalDrafterOptions` (the defaults
    when None; the old keyword form ``LocalDrafter(model, max_new_tokens=…)`` still works and
    warns). ``adapter``: a tuned adapter's folder (see ``spectool drafters tune``); it
    picks the "auto" limits of the options and the compact format the adapter was tuned on.
    ``values``: with ``choose_values``, the :class:`~._learning.LearningDrafter` whose mined
    patterns say which parameters are copied (shared with a combined drafter's member, or
    primed with traces); None: one of its own from nothing. Each draft teaches it the
    conversation so far.
    """

    def __init__(
        self,
        model: Any = DEFAULT_LOCAL_MODEL,
        options: LocalDrafterOptions | None = None,
        *,
        adapter: str | os.PathLike[str] | None = None,
        values: LearningDrafter | None = None,
        **old_keywords: Any,
    ) -> None:
        if options is not None and not isinstance(options, LocalDrafterOptions):
            raise ConfigError(f"options must be a LocalDrafterOptions, not {type(options).__name__}")
        if old_keywords:  # the signature before the options object: deprecated, still honoured
            options = from_keywords(options, old_keywords)
        options = options or LocalDrafterOptions()
        self.options = options.resolved(tuned=adapter is not None)
        #: "transformers" or "llama.cpp", settled here (a ConfigError if the choice cannot run)
        self.runtime = choose_runtime(self.options, model, adapter)
        self._source = model
        self._loaded: LocalModel | LlamaModel | None = None
        self.adapter = adapter
        if values is not None and not callable(getattr(values, "learn", None)):
            raise ConfigError(f"values must be a LearningDrafter, not {type(values).__name__}")
        if values is None and self.options.choose_values:
            from ..history._learning import LearningDrafter

            values = LearningDrafter()
        #: where ``choose_values`` reads the copied parameters from (None: the option is off)
        self.values = values if self.options.choose_values else None
        #: the last draft's ``{tool: {parameter: [values]}}`` the grammar admitted only
        self.last_choices: dict[str, dict[str, list[Any]]] = {}
        if isinstance(model, tuple):
            given = with_adapter(model[0], adapter) if adapter is not None else model[0]
            self._loaded = LocalModel(given, model[1], "given")
        #: The compact format the adapter was tuned on (None: the newest).
        self.compact_version = adapter_format(adapter) if adapter is not None else None
        #: Seconds (wall and thread CPU) the last draft's decoding took (for benchmarks).
        self.last_generate_s: float | None = None
        self.last_generate_cpu_s: float | None = None
        self.last_texts: list[str] = []
        #: Token accounting of the last draft (prefill reused, forwards, forced tokens, row log-probs).
        self.last_stats: DecodeStats | None = None
        #: Probability of the last draft's best row (None before the first draft).
        self.last_confidence: float | None = None

    @property
    def compact_options(self) -> dict[str, Any]:
        """Keywords for :func:`._compact.compact_prompt_ids` (format version from the adapter)."""
        out: dict[str, Any] = {"max_tools": self.options.max_tools, "described": self.options.described}
        if self.compact_version is not None:
            out["version"] = self.compact_version
        return out

    async def load(self) -> LocalModel | LlamaModel:
        """Load (once, shared between drafters) in a worker thread; safe to call early."""
        if self._loaded is None and self.runtime == "llama.cpp":
            self._loaded = await anyio.to_thread.run_sync(_load_gguf, self._source, self.options.threads)
        if self._loaded is None:
            self._loaded = await anyio.to_thread.run_sync(
                load_shared, self._source, self.options.dtype, self.adapter
            )
        loaded = self._loaded
        if self.options.copy_bias and isinstance(loaded, LocalModel):  # the token-text table (~0.3 s)
            await anyio.to_thread.run_sync(token_table, loaded.tokenizer, output_width(loaded.model))
        return self._loaded

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        tools = tool_schemas(request.tools)
        if not tools:
            return []
        loaded = await self.load()
        choices = self.choices(request)
        stop = threading.Event()
        try:
            texts = await anyio.to_thread.run_sync(
                self._decode, loaded, request, stop, choices, abandon_on_cancel=True
            )
        except (DrafterError, ConfigError):
            raise
        except Exception as exc:  # torch/xgrammar/llama.cpp failures become drafter failures
            raise DrafterError(f"local drafter failed: {type(exc).__name__}: {exc}") from exc
        finally:
            stop.set()  # cancelled or done: a still-running decode stops at its next forward
        if not self._confident():
            return []
        calls: list[ToolCall] = []
        for text in texts:
            calls.extend(salvage_tool_calls(text))
        return with_known_tools(calls, tools)

    def choices(self, request: DraftRequest) -> dict[str, dict[str, list[Any]]]:
        """The values the grammar admits for copied parameters (empty with the option off).
        Runs on the caller's thread, as the learning drafter drafts: its patterns are not
        read while another draft updates them."""
        if self.values is None:
            return {}
        from ..history._choices import value_choices

        tools = {t["function"]["name"]: t["function"] for t in self.draft_tools(request) if "function" in t}
        try:
            found = value_choices(request.messages, tools, self.values.patterns)
        finally:
            self.values.learn(request.messages)
        self.last_choices = found
        return found

    def _confident(self) -> bool:
        """The gate: the best row's probability under the grammar reaches ``min_confidence``."""
        logps = self.last_stats.row_logps if self.last_stats is not None else []
        self.last_confidence = math.exp(max(logps)) if logps else None
        threshold = self.options.min_confidence
        return threshold <= 0 or (self.last_confidence is not None and self.last_confidence >= threshold)

    def draft_tools(self, request: DraftRequest) -> list[Mapping[str, Any]]:
        """The tools the prompt shows and the grammar allows (compact: the ranked candidates)."""
        if self.options.prompt == "native":
            return [{"type": "function", "function": b} for b in tool_schemas(request.tools).values()]
        from ._compact import compact_tools

        bodies = compact_tools(request, max_tools=self.options.max_tools)
        return [{"type": "function", "function": b} for b in bodies]

    def grammar_tools(
        self, request: DraftRequest, choices: Mapping[str, Mapping[str, Any]] | None = None
    ) -> list[Mapping[str, Any]]:
        """The tools the grammar lets the draft name: :meth:`draft_tools`, narrowed to the top
        ``narrow_tools`` by retrieval score when that option is on; ``choices``' parameters
        admit only their candidate values (:func:`._grammar.with_choices`)."""
        tools = self.draft_tools(request)
        if choices:
            from ._grammar import with_choices

            tools = list(with_choices(tools, choices))
        if not self.options.narrow_tools:
            return tools
        from ._compact import narrowed

        bodies = narrowed(request, [dict(t["function"]) for t in tools], self.options.narrow_tools)
        return [{"type": "function", "function": b} for b in bodies]

    def token_ids(self, loaded: LocalModel | LlamaModel, request: DraftRequest) -> list[int]:
        """The drafting prompt's token ids for this drafter's ``prompt`` format."""
        if self.options.prompt == "native":
            from ._native import native_prompt_ids

            tools = self.draft_tools(request)
            return native_prompt_ids(loaded.tokenizer, request, tools, self.options.max_prompt_tokens)
        from ._compact import compact_prompt_ids

        return compact_prompt_ids(loaded.tokenizer, request, **self.compact_options)

    def _decode(
        self,
        loaded: LocalModel | LlamaModel,
        request: DraftRequest,
        stop: threading.Event,
        choices: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """Under the model's lock: the prompt ids, then the runtime's rows as texts, timed."""
        if isinstance(loaded, LocalModel):
            rows, clock = self._torch_rows(loaded, request, choices), time.thread_time
        else:  # llama.cpp computes in its own thread pool as well as this thread: process CPU time
            rows, clock = self._llama_rows(loaded, request, choices), time.process_time
        with loaded.lock:
            if stop.is_set():
                return []
            ids = self.token_ids(loaded, request)
            start, cpu = time.perf_counter(), clock()
            texts = rows(ids, stop)
            self.last_generate_s = time.perf_counter() - start
            self.last_generate_cpu_s = clock() - cpu
        self.last_texts = texts
        return texts

    def _llama_rows(
        self, loaded: LlamaModel, request: DraftRequest, choices: Mapping[str, Mapping[str, Any]] | None
    ) -> Callable[[list[int], threading.Event], list[str]]:
        """The llama.cpp runtime: the schema as GBNF, λ rows (row 0 greedy)."""
        from ._llamacpp import draft_texts, grammar_text

        opts = self.options
        grammar = grammar_text(
            self.grammar_tools(request, choices),
            native=opts.prompt == "native",
            max_calls=int(opts.max_calls),
            max_string_length=opts.max_string_length,  # type: ignore[arg-type]
        )
        self.last_stats = None  # no row log-probabilities on this runtime (no gate: _runtime)
        return lambda ids, stop: draft_texts(
            loaded,
            ids,
            grammar,
            rows=max(1, int(request.samples)) if opts.temperature > 0 else 1,
            temperature=opts.temperature,
            top_p=opts.top_p,
            greedy_first=opts.greedy_first,
            max_new_tokens=opts.max_new_tokens,
            reuse=opts.prefix_cache,
            stop=stop,
        )

    def _torch_rows(
        self, loaded: LocalModel, request: DraftRequest, choices: Mapping[str, Mapping[str, Any]] | None
    ) -> Callable[[list[int], threading.Event], list[str]]:
        """The transformers runtime: the grammar compiles on the other core during the prefill,
        rows decode with :mod:`._decode` or as a beam (:mod:`._beam`)."""
        import torch

        opts = self.options
        native = opts.prompt == "native"
        vocab = output_width(loaded.model)
        grammar = xgr = None
        stops = set(eos_ids(loaded))
        if opts.constrained:
            # strings are bounded in the decode loop, not the grammar: a grammar maxLength costs
            # ~0.2 s of compile per new tool set (see _decode.decode_rows)
            constraint = loaded.constraint(None, int(opts.max_calls))
            grammar = COMPILER.submit(
                constraint.compiled, self.grammar_tools(request, choices), native=native
            )
            xgr = constraint.xgr
            stops |= set(constraint.stop_token_ids)
        stats = DecodeStats()
        self.last_stats = stats
        lam = max(1, int(request.samples))

        def rows(ids: list[int], stop: threading.Event) -> list[str]:
            inputs = DecodeInputs(
                *(loaded.model, loaded.tokenizer, grammar, xgr, ids, loaded.prefix, stop),
                max_new_tokens=opts.max_new_tokens,
                stop_ids=sorted(stops),
                vocab=vocab,
                jump_forward=opts.jump_forward,
                reuse=opts.prefix_cache,
                stats=stats,
                max_string_length=opts.max_string_length if opts.constrained else None,  # type: ignore[arg-type]
            )
            with torch.inference_mode():
                if opts.diversity == "beam" and grammar is not None:
                    from ._beam import beam_rows

                    schemas = tool_schemas(request.tools)
                    out = beam_rows(inputs, width=lam, key=functools.partial(_answer_key, schemas=schemas))
                else:
                    branch = opts.diversity == "branch"
                    out = decode_rows(
                        inputs,
                        rows=lam if (opts.temperature > 0 or branch) else 1,
                        temperature=opts.temperature,
                        top_p=opts.top_p,
                        greedy_first=opts.greedy_first,
                        branch=branch,
                        bias=self._copy_bias(loaded, request, vocab),
                    )
            # native tags (<tool_call>) are added tokens: keep them, the parser reads them
            return [loaded.tokenizer.decode(r, skip_special_tokens=not native) for r in out]

        return rows

    def _copy_bias(self, loaded: LocalModel, request: DraftRequest, vocab: int) -> CopyBias | None:
        beta = float(self.options.copy_bias)
        if not beta:
            return None
        return CopyBias(source_text(request.messages), token_table(loaded.tokenizer, vocab), beta)


def _answer_key(text: str, schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Canonical name of a drafted answer: its calls' keys in order (None: no offered call)."""
    calls = with_known_tools(salvage_tool_calls(text), schemas)
    return "\x1e".join(call_key(c, schemas) for c in calls) if calls else None


def _load_gguf(source: Any, threads: int) -> LlamaModel:
    from ._llamacpp import gguf_source, load_llama

    gguf = gguf_source(source)
    if gguf is None:  # choose_runtime let only GGUF sources through
        raise ConfigError(f"the llama.cpp runtime loads GGUF files; {source!r} is none")
    return load_llama(gguf, threads)
