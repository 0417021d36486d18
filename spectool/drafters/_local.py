"""LocalDrafter: an in-process transformers model drafts tool calls.

The default path (``prompt="compact"``, ``decoder="fast"``) renders the request as the compact
prompt of :mod:`._compact` (candidate tools' signatures and recent messages, the format a tuned
adapter learns) and decodes with :mod:`._decode`: the unchanged prompt prefix keeps its KV cache
across drafts, λ rows share one prefill, tokens the JSON schema forces are fed in one forward,
and a row stops as soon as its answer is complete. The earlier path (``prompt="examples"``,
``decoder="generate"``: xLAM-style prompt with worked examples, one batched
``transformers.generate``) stays selectable for comparison. Calls are decoded under a
JSON-schema grammar (see :mod:`._grammar`) so even a 135M model emits well-formed calls to
offered tools. Generation runs in a worker thread, serialized per model, and stops at its next
forward when the caller is cancelled (the speculator's timeout). torch/transformers load lazily.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from .._types import DraftRequest, ToolCall
from ..errors import ConfigError, DrafterError
from ..toolcall_text import salvage_tool_calls
from ._common import tool_schemas, with_known_tools
from ._copy import CopyBias, source_text, token_table
from ._decode import DecodeStats, decode_rows
from ._generate import eos_ids, generate_texts
from ._loading import (
    COMPILER,
    DEFAULT_LOCAL_MODEL,
    LocalModel,
    adapter_format,
    load_shared,
    output_width,
    with_adapter,
)
from ._prompts import DEFAULT_EXAMPLES, WorkedExample, draft_messages

__all__ = ["DEFAULT_LOCAL_MODEL", "LocalDrafter", "LocalModel", "TUNED_LIMITS", "UNTUNED_LIMITS"]


#: Answer limits of an untuned model: it has not learnt where an answer ends, so it stops at
#: the first complete call and its strings are cut short (a rambling string costs g).
UNTUNED_LIMITS: dict[str, Any] = {"max_calls": 1, "max_string_length": 64, "copy_bias": 0.0}
#: A tuned adapter was trained on whole responses (parallel calls, long string answers) and
#: closes them itself: up to 4 calls (BFCL parallel answers hold ≤ 4) and strings unbounded in
#: the grammar, which also makes a new tool set's grammar compile in ms instead of ~0.2–0.7 s
#: (``max_new_tokens`` bounds a runaway). Its copy bias of 1 nat was picked on the BFCL dev split
#: (0 / 1 / 2: 52 / 55 / 53 of 113 speculable calls, four single-turn categories, λ = 1).
TUNED_LIMITS: dict[str, Any] = {"max_calls": 4, "max_string_length": None, "copy_bias": 1.0}


class LocalDrafter:
    """Drafts calls with an in-process causal LM (default: xLAM-2-1b if cached, else SmolLM2).

    ``model``: None/"embedded", an HF id or folder, a ``.gguf`` path, or a loaded
    ``(model, tokenizer)`` pair; ``adapter``: a tuned adapter's folder (see ``spectool drafters
    tune``). ``constrained`` decodes under the tools' JSON schema. ``prompt``: ``"compact"``
    (tool signatures + recent messages) or ``"examples"`` (xLAM prompt with the worked
    ``examples`` before the whole conversation). ``decoder``: ``"fast"`` (prefix KV reuse,
    ``jump_forward`` over schema-forced tokens, early stop) or ``"generate"`` (one batched
    ``transformers.generate``). ``max_calls`` is the longest answer (1 stops at the first
    complete call) and ``max_string_length`` the longest string argument (None: unbounded);
    ``"auto"`` picks them by whether an adapter is given (:data:`UNTUNED_LIMITS` /
    :data:`TUNED_LIMITS`). With λ > 1 the rows fork off the greedy row at its least sure steps
    (``diversity="branch"``, fast decoder: deterministic, and a fork re-decodes only its tail),
    or with ``"sample"`` they are sampled at ``temperature`` (``greedy_first`` keeps row 0
    greedy). ``copy_bias`` (nats, fast decoder) nudges string values toward verbatim spans of
    the user and tool messages (:mod:`._copy`); 0 turns it off, ``"auto"`` picks it with the
    limits.
    """

    def __init__(
        self,
        model: Any = DEFAULT_LOCAL_MODEL,
        *,
        constrained: bool = True,
        examples: Sequence[WorkedExample] = DEFAULT_EXAMPLES,
        max_new_tokens: int = 192,
        temperature: float = 0.8,
        top_p: float = 0.95,
        dtype: str = "auto",
        max_string_length: int | str | None = "auto",
        max_calls: int | str = "auto",
        max_prompt_tokens: int = 2048,
        greedy_first: bool = True,
        prompt: str = "compact",
        decoder: str = "fast",
        jump_forward: bool = True,
        prefix_cache: bool = True,
        adapter: str | os.PathLike[str] | None = None,
        compact_options: Mapping[str, Any] | None = None,
        diversity: str = "branch",
        copy_bias: float | str = "auto",
    ) -> None:
        limits = TUNED_LIMITS if adapter is not None else UNTUNED_LIMITS
        max_calls = limits["max_calls"] if max_calls == "auto" else max_calls
        if max_string_length == "auto":
            max_string_length = limits["max_string_length"]
        if max_new_tokens < 1 or temperature < 0 or not isinstance(max_calls, int) or max_calls < 1:
            raise ConfigError("max_new_tokens and max_calls must be ≥ 1 and temperature ≥ 0")
        if max_string_length is not None and (
            not isinstance(max_string_length, int) or max_string_length < 1
        ):
            raise ConfigError("max_string_length must be ≥ 1, or None for unbounded strings")
        if copy_bias == "auto":
            copy_bias = limits["copy_bias"]
        if not (isinstance(copy_bias, (int, float)) and 0 <= copy_bias < math.inf):
            raise ConfigError(f"copy_bias must be a finite number ≥ 0 (got {copy_bias!r})")
        if diversity not in ("sample", "branch"):
            raise ConfigError(f"diversity must be 'sample' or 'branch' (got {diversity!r})")
        if prompt not in ("compact", "examples") or decoder not in ("fast", "generate"):
            raise ConfigError(
                f"prompt must be 'compact' or 'examples' (got {prompt!r}) and decoder "
                f"'fast' or 'generate' (got {decoder!r})"
            )
        self._source = model
        self._loaded: LocalModel | None = None
        self.adapter = adapter
        if isinstance(model, tuple):
            given = with_adapter(model[0], adapter) if adapter is not None else model[0]
            self._loaded = LocalModel(given, model[1], "given")
        self.constrained = constrained
        self.examples = tuple(examples)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.dtype = dtype
        self.max_string_length = max_string_length
        self.max_calls = max_calls
        self.max_prompt_tokens = max_prompt_tokens
        self.greedy_first = greedy_first
        self.prompt = prompt
        self.decoder = decoder
        self.jump_forward = jump_forward
        self.prefix_cache = prefix_cache
        self.diversity = diversity
        self.copy_bias = float(copy_bias)
        self.compact_options = dict(compact_options or {})
        if adapter is not None and "version" not in self.compact_options:
            self.compact_options["version"] = adapter_format(adapter)
        #: Seconds the last batched generate took (for benchmarks).
        self.last_generate_s: float | None = None
        self.last_generate_cpu_s: float | None = None
        self.last_texts: list[str] = []
        #: Token accounting of the last fast-path draft (prefill reused, forwards, forced tokens).
        self.last_stats: DecodeStats | None = None

    async def load(self) -> LocalModel:
        """Load (once, shared between drafters) in a worker thread; safe to call early."""
        if self._loaded is None:
            self._loaded = await anyio.to_thread.run_sync(load_shared, self._source, self.dtype, self.adapter)
        if self.copy_bias:  # the token-text table (~0.3 s once per tokenizer) off the first draft
            loaded = self._loaded
            await anyio.to_thread.run_sync(token_table, loaded.tokenizer, output_width(loaded.model))
        return self._loaded

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        tools = tool_schemas(request.tools)
        if not tools:
            return []
        loaded = await self.load()
        stop = threading.Event()
        work = self._generate if self.decoder == "generate" else self._decode_fast
        try:
            texts = await anyio.to_thread.run_sync(work, loaded, request, stop, abandon_on_cancel=True)
        except DrafterError:
            raise
        except Exception as exc:  # torch/xgrammar failures become drafter failures
            raise DrafterError(f"local drafter failed: {type(exc).__name__}: {exc}") from exc
        finally:
            stop.set()  # cancelled or done: a still-running decode stops at its next forward
        calls: list[ToolCall] = []
        for text in texts:
            calls.extend(salvage_tool_calls(text))
        return with_known_tools(calls, tools)

    def draft_tools(self, request: DraftRequest) -> list[Mapping[str, Any]]:
        """The tools the prompt shows and the grammar allows (compact: the ranked candidates)."""
        if self.prompt != "compact":
            return list(request.tools)
        from ._compact import compact_tools

        limit = self.compact_options.get("max_tools")
        bodies = compact_tools(request, **({"max_tools": limit} if limit else {}))
        return [{"type": "function", "function": b} for b in bodies]

    def token_ids(self, loaded: LocalModel, request: DraftRequest) -> list[int]:
        """The drafting prompt's token ids for this drafter's ``prompt`` format."""
        if self.prompt == "compact":
            from ._compact import compact_prompt_ids

            return compact_prompt_ids(loaded.tokenizer, request, **self.compact_options)
        return [int(t) for t in self.prompt_ids(loaded, request)[0]]

    def _decode_fast(self, loaded: LocalModel, request: DraftRequest, stop: threading.Event) -> list[str]:
        import torch

        branch = self.diversity == "branch"
        rows = max(1, int(request.samples)) if (self.temperature > 0 or branch) else 1
        vocab = output_width(loaded.model)
        grammar = xgr = None
        stops = set(eos_ids(loaded))
        if self.constrained:
            # strings are bounded in the decode loop, not the grammar: a grammar maxLength costs
            # ~0.2 s of compile per new tool set (see _decode.decode_rows)
            constraint = loaded.constraint(None, self.max_calls)
            grammar, xgr = COMPILER.submit(constraint.compiled, self.draft_tools(request)), constraint.xgr
            stops |= set(constraint.stop_token_ids)
        stats = DecodeStats()
        with loaded.lock, torch.inference_mode():
            if stop.is_set():
                return []
            ids = self.token_ids(loaded, request)
            start, cpu = time.perf_counter(), time.thread_time()
            rows_out = decode_rows(
                loaded.model,
                loaded.tokenizer,
                grammar,
                xgr,
                ids,
                loaded.prefix,
                stop,
                rows=rows,
                max_new_tokens=self.max_new_tokens,
                stop_ids=sorted(stops),
                vocab=vocab,
                temperature=self.temperature,
                top_p=self.top_p,
                greedy_first=self.greedy_first,
                jump_forward=self.jump_forward,
                reuse=self.prefix_cache,
                stats=stats,
                branch=branch,
                bias=self._copy_bias(loaded, request, vocab),
                max_string_length=self.max_string_length if self.constrained else None,
            )
            self.last_generate_s = time.perf_counter() - start
            self.last_generate_cpu_s = time.thread_time() - cpu
        self.last_stats = stats
        texts = [loaded.tokenizer.decode(r, skip_special_tokens=True) for r in rows_out]
        self.last_texts = texts
        return texts

    def _copy_bias(self, loaded: LocalModel, request: DraftRequest, vocab: int) -> CopyBias | None:
        if not self.copy_bias:
            return None
        table = token_table(loaded.tokenizer, vocab)
        return CopyBias(source_text(request.messages), table, self.copy_bias)

    def prompt_ids(self, loaded: LocalModel, request: DraftRequest) -> Any:
        """Token ids of the drafting prompt, dropping the oldest turns to fit the budget."""
        msgs = list(request.messages)
        while True:
            ids = self._template(loaded.tokenizer, draft_messages(msgs, request.tools, self.examples))
            non_system = [i for i, m in enumerate(msgs) if m.get("role") not in ("system", "developer")]
            if ids.shape[-1] <= self.max_prompt_tokens or len(non_system) <= 1:
                return ids
            del msgs[non_system[0]]

    @staticmethod
    def _template(tokenizer: Any, messages: list[dict[str, str]]) -> Any:
        try:
            return tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )["input_ids"]
        except Exception:  # a template that rejects role "tool": pass results as user turns
            fixed = [
                m if m["role"] != "tool" else {"role": "user", "content": f"Tool result: {m['content']}"}
                for m in messages
            ]
            return tokenizer.apply_chat_template(
                fixed, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )["input_ids"]

    def _generate(self, loaded: LocalModel, request: DraftRequest, stop: threading.Event) -> list[str]:
        texts, self.last_generate_s, self.last_generate_cpu_s = generate_texts(self, loaded, request, stop)
        self.last_texts = texts
        return texts
