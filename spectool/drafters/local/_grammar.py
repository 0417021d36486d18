"""Schema-constrained decoding of tool calls for the local drafter.

:func:`calls_schema` (pure, stdlib) turns the offered tools into one JSON schema: an array of
calls whose items are ``anyOf`` over ``{"name": const, "arguments": <tool parameters>}``, with
every free string given a ``maxLength`` and every array a ``maxItems`` so a small model cannot
run away ("NVDA_2023_2023_…").

:class:`GrammarConstraint` compiles that schema with **xgrammar** (chosen over llguidance and
outlines: see docs/drafters.md) for one tokenizer and caches the compiled grammar per tool set
(the decode loops of :mod:`._decode` and :mod:`._beam` apply it). xgrammar is imported lazily.

:func:`with_choices` (pure) narrows the tools the grammar is built from: a parameter given
candidate values becomes an ``enum`` of them, so the model chooses a value instead of writing one.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ConfigError, DrafterError
from .._common import tool_schemas

__all__ = ["GrammarConstraint", "calls_schema", "with_choices"]

_STRING_FREE = ("enum", "const", "maxLength", "pattern", "format")


def calls_schema(
    tools: Sequence[Mapping[str, Any]],
    *,
    max_string_length: int | None = 64,
    max_calls: int = 4,
) -> dict[str, Any]:
    """JSON schema of xLAM's answer: 1..``max_calls`` calls to the offered tools.

    ``max_string_length`` None leaves free strings unbounded: xgrammar compiles a ``maxLength``
    as a bounded repetition, which cost 0.23 s per new tool set at 64 and 0.69 s at 160 on the
    reference CPU against 5 ms without (the draft's ``max_new_tokens`` still bounds a runaway).
    """
    branches = []
    defs: dict[str, Any] = {}
    for name, body in tool_schemas(tools).items():
        params = copy.deepcopy(dict(body["parameters"]))
        local_defs = params.pop("$defs", None) or {}
        if any(k in defs and defs[k] != v for k, v in local_defs.items()):
            params = {"type": "object"}  # clashing $defs across tools: keep only the name exact
        else:
            defs.update(local_defs)
        params.setdefault("type", "object")
        branches.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not branches:
        raise DrafterError("no tools to constrain the draft to")
    schema: dict[str, Any] = {
        "type": "array",
        "items": branches[0] if len(branches) == 1 else {"anyOf": branches},
        "minItems": 1,
        "maxItems": max_calls,
    }
    if defs:
        schema["$defs"] = defs
    return _bounded(schema, max_string_length, 8)  # arrays of at most 8 items


def with_choices(
    tools: Sequence[Mapping[str, Any]], choices: Mapping[str, Mapping[str, Sequence[Any]]]
) -> list[dict[str, Any]]:
    """Copies of ``tools`` (OpenAI tool dicts) where each parameter that ``choices`` gives
    values for (``{tool: {parameter: [values]}}``) admits only those values (an ``enum``; its
    description kept). A parameter with no values, or absent from the tool, keeps its schema."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        body = tool.get("function", tool)
        picked = choices.get(str(body.get("name")), {})
        props = (body.get("parameters") or {}).get("properties") if picked else None
        if not isinstance(props, Mapping) or not any(picked.get(p) for p in props):
            out.append(dict(tool))
            continue
        body = copy.deepcopy(dict(body))
        for pname, values in picked.items():
            if values and pname in body["parameters"]["properties"]:
                old = body["parameters"]["properties"][pname]
                note = old.get("description") if isinstance(old, Mapping) else None
                narrowed: dict[str, Any] = {"enum": _distinct(values)}
                if isinstance(note, str):
                    narrowed["description"] = note
                body["parameters"]["properties"][pname] = narrowed
        out.append({**tool, "function": body} if "function" in tool else body)
    return out


def _distinct(values: Sequence[Any]) -> list[Any]:
    """``values`` without repeats (JSON-equal ones), in order: an enum lists each once."""
    seen: set[str] = set()
    out = []
    for v in values:
        tag = json.dumps(v, sort_keys=True, default=repr)
        if tag not in seen:
            seen.add(tag)
            out.append(v)
    return out


def _bounded(node: Any, max_len: int | None, max_items: int) -> Any:
    """A copy of ``node`` with limits on free strings and arrays, recursively."""
    if isinstance(node, list):
        return [_bounded(x, max_len, max_items) for x in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: _bounded(v, max_len, max_items) if k not in ("enum", "const", "default") else v
        for k, v in node.items()
    }
    types = out.get("type")
    types = {types} if isinstance(types, str) else set(types or ())
    if max_len is not None and "string" in types and not any(k in out for k in _STRING_FREE):
        out["maxLength"] = max_len
    if "array" in types and "maxItems" not in out:
        out["maxItems"] = max_items
    return out


class GrammarConstraint:
    """xgrammar compiled for one tokenizer; caches compiled schemas by tool set."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        *,
        max_string_length: int | None = 64,
        max_calls: int = 4,
        cache_size: int = 32,
    ) -> None:
        try:
            import xgrammar as xgr
        except ImportError as exc:
            raise ConfigError(
                "constrained drafting needs xgrammar; pip install xgrammar "
                "(on CPU install it with --no-deps plus apache-tvm-ffi), or pass constrained=False"
            ) from exc
        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        # our LRU below bounds the compiled grammars; xgrammar's own cache is unbounded by
        # default and would keep every tool set a long-lived process ever saw
        self._compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.stop_token_ids = list(info.stop_token_ids)
        self.vocab_size = vocab_size
        self.max_string_length = max_string_length
        self.max_calls = max_calls
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def xgr(self) -> Any:
        """The xgrammar module (imported once, lazily)."""
        return self._xgr

    def compiled(self, tools: Sequence[Mapping[str, Any]], *, native: bool = False) -> Any:
        """The grammar for ``tools``: a JSON array of calls, or with ``native`` the model's own
        tagged calls (:func:`._native.native_grammar`)."""
        schema = calls_schema(tools, max_string_length=self.max_string_length, max_calls=self.max_calls)
        if native:  # one call's schema; the tags and the repetition come from native_grammar
            schema = {**schema["items"], **({"$defs": schema["$defs"]} if "$defs" in schema else {})}
        text = ("native:" if native else "") + json.dumps(schema)  # key order is the order written
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        try:  # no free whitespace: a model cannot stall by emitting blanks forever
            if native:
                from ._native import native_grammar

                grammar = self._compiler.compile_grammar(native_grammar(self._xgr, schema, self.max_calls))
            else:
                grammar = self._compiler.compile_json_schema(text, any_whitespace=False)
        except Exception as exc:  # xgrammar raises plain RuntimeError/ValueError on bad schemas
            raise DrafterError(f"cannot compile the tools' schema into a grammar: {exc}") from exc
        with self._lock:
            self._cache[text] = grammar
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return grammar
