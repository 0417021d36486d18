"""BFCL tasks read straight from the ``bfcl-eval`` wheel (never installed: it pins old numpy).

The wheel is fetched once with ``pip download --no-deps`` and read as a zip archive: prompts
from ``bfcl_eval/data/BFCL_v4_<category>.json``, answers from ``possible_answer/``, multi-turn
tool docs from ``multi_turn_func_doc/``. Tool docs are converted from Gorilla's dialect (dotted
names, ``dict``/``float``/``tuple``/``any`` types) to OpenAI tools.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spectool import ToolCall
from spectool.embedded import fetch_wheel
from spectool.errors import ConfigError

__all__ = [
    "ALL_CATEGORIES",
    "BFCL_WHEEL",
    "MULTI_TURN_CATEGORIES",
    "SINGLE_TURN_CATEGORIES",
    "Task",
    "bfcl_wheel",
    "load_tasks",
    "openai_tool",
    "single_turn_task",
    "tool_name",
]

BFCL_WHEEL = "bfcl-eval==2026.3.23"
SINGLE_TURN_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
)
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_long_context")
# The rest of the wheel. Executable multi-turn with a twist: miss_func holds tools back until a
# later turn, miss_param leaves an argument to a later turn. No ground-truth calls: the
# irrelevance/relevance sets (BFCL checks only whether a call is made) and the agentic ones
# (memory, web_search: their answers are text). format_sensitivity re-lists other tasks by id.
EXTRA_SINGLE_TURN = ("live_parallel", "live_parallel_multiple", "simple_java", "simple_javascript")
EXTRA_MULTI_TURN = ("multi_turn_miss_func", "multi_turn_miss_param")
NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance", "memory", "web_search")
ALL_CATEGORIES = (
    SINGLE_TURN_CATEGORIES
    + EXTRA_SINGLE_TURN
    + MULTI_TURN_CATEGORIES
    + EXTRA_MULTI_TURN
    + NO_CALL_CATEGORIES
    + ("format_sensitivity",)
)
# Agentic categories' tool docs (bfcl_eval/constants: the key-value memory backend stands for all three)
_AGENTIC_DOCS = {"MemoryAPI": "memory_kv.json", "WebSearchAPI": "web_search.json"}
_DATA = "bfcl_eval/data"
# Gorilla class name -> multi-turn tool doc file (bfcl_eval/constants/executable_backend_config.py)
CLASS_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "int": "integer",
    "list": "array",
    "str": "string",
    "bool": "boolean",
    "String": "string",
    "any": None,
    # Java / JavaScript docs (simple_java, simple_javascript)
    "Boolean": "boolean",
    "long": "integer",
    "double": "number",
    "Array": "array",
    "ArrayList": "array",
    "HashMap": "object",
}


@dataclass(frozen=True)
class Task:
    """One BFCL entry: user turns, OpenAI tools, and the ground-truth calls of each turn."""

    id: str
    category: str
    turns: Sequence[Sequence[Mapping[str, Any]]]  # per turn: the new user messages
    tools: Sequence[Mapping[str, Any]]  # Chat Completions tool entries
    ground_truth: Sequence[Sequence[ToolCall]]  # per turn: calls in order
    classes: Sequence[str] = ()  # executable Gorilla classes (multi-turn only)
    initial_config: Mapping[str, Any] = field(default_factory=dict)
    long_context: bool = False
    #: OpenAI tool name -> original Gorilla name (dots restored)
    names: Mapping[str, str] = field(default_factory=dict)
    #: tool name -> first turn that offers it (multi_turn_miss_func holds tools back)
    held_back: Mapping[str, int] = field(default_factory=dict)
    #: builds a fresh executable world (τ²: the domain's tools on a copy of its database); the
    #: replay then makes one call per response, as for BFCL's multi-turn classes
    world: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    #: single-turn: per gold call of the turn, (tool name, BFCL's acceptable values per argument);
    #: the gold call takes the first of each, the checker takes any (misses report the difference)
    options: Sequence[tuple[str, Mapping[str, Any]]] = field(default=(), compare=False, repr=False)

    def tools_at(self, turn: int) -> list[Mapping[str, Any]]:
        """The tools offered at user turn ``turn`` (all of them unless some are held back)."""
        return [t for t in self.tools if self.held_back.get(t["function"]["name"], 0) <= turn]

    @property
    def multi_turn(self) -> bool:
        return bool(self.classes) or self.world is not None

    @property
    def calls(self) -> int:
        return sum(len(t) for t in self.ground_truth)


def bfcl_wheel() -> Path:
    """The bfcl-eval wheel, fetched once into spectool's cache."""
    return fetch_wheel(BFCL_WHEEL)


@functools.cache
def _read_lines(wheel: str, member: str) -> tuple[dict[str, Any], ...]:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as fh:
            return tuple(json.loads(line) for line in fh.read().decode("utf-8").splitlines() if line.strip())
    except KeyError as exc:
        raise ConfigError(f"{member} is not in {Path(wheel).name}") from exc


def tool_name(name: str) -> str:
    """An OpenAI-legal tool name for a Gorilla name (``math.factorial`` → ``math_factorial``)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]


def _schema(node: Any) -> Any:
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            mapped = _TYPES.get(value, value) if isinstance(value, str) else value
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, Mapping):
            out["properties"] = {k: _schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _schema(value)
        elif key in ("optional", "response"):
            continue  # Gorilla-only keys; "required" already says what is optional
        else:
            out[key] = value
    if out.get("type") == "array" and "items" not in out:
        out["items"] = {}
    return out


def openai_tool(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Gorilla function doc as a Chat Completions tool entry."""
    params = _schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {
        "type": "function",
        "function": {
            "name": tool_name(doc["name"]),
            "description": doc.get("description", ""),
            "parameters": params,
        },
    }


def _first_option(options: Any) -> Any:
    """The first real value of a BFCL option list ("" or None means "may be omitted").

    A dict-typed argument's option is itself a dict whose values are option lists (BFCL's
    checker reads ``{"body": [{"mode": ["COOL"], "wind": ["MID", ""]}]}`` so), resolved the
    same way, recursively (also inside a list of such dicts); a dict with a non-list value is
    taken as it is.
    """
    chosen: Any = next((o for o in options if o not in ("", None)), None)  # any JSON value
    if _optioned(chosen):
        return _resolved(chosen)
    if isinstance(chosen, list) and chosen and all(_optioned(item) for item in chosen):
        return [_resolved(item) for item in chosen]  # a list of such dicts
    return chosen


def _optioned(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, list) for v in value.values())


def _resolved(params: dict[str, Any]) -> dict[str, Any]:
    args = {}
    for k, options in params.items():
        chosen = _first_option(options)
        if chosen is not None:
            args[k] = chosen
    return args


def _single_truth(answer: list[dict[str, Any]]) -> list[ToolCall]:
    """BFCL single-turn answers list allowed values per argument; take the first real one."""
    return [ToolCall(tool_name(name), _resolved(params)) for item in answer for name, params in item.items()]


def parse_call(text: str, positional: Mapping[str, Sequence[str]]) -> ToolCall:
    """``cd(folder='x')`` or ``sort('f.pdf')`` → ToolCall; positional names come from the docs."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
            raise ValueError("not a call")
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        order = positional.get(name, ())
        args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
        args.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg})
    except (SyntaxError, ValueError, IndexError) as exc:
        raise ConfigError(f"cannot parse BFCL ground-truth call {text!r}: {exc}") from exc
    return ToolCall(name, args)


@functools.cache
def class_docs(wheel: str, class_name: str) -> tuple[dict[str, Any], ...]:
    return _read_lines(wheel, f"{_DATA}/multi_turn_func_doc/{CLASS_DOCS[class_name]}")


def load_tasks(category: str, limit: int | None = None, wheel: Path | None = None) -> list[Task]:
    """The first ``limit`` tasks of a BFCL category (any category in the wheel)."""
    if category not in ALL_CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r} (known: {', '.join(ALL_CATEGORIES)})")
    w = str(wheel or bfcl_wheel())
    if category == "format_sensitivity":
        return _format_sensitivity(w, limit)
    entries = _read_lines(w, f"{_DATA}/BFCL_v4_{category}.json")
    answers = (
        {}
        if category in NO_CALL_CATEGORIES
        else {
            a["id"]: a["ground_truth"]
            for a in _read_lines(w, f"{_DATA}/possible_answer/BFCL_v4_{category}.json")
        }
    )
    tasks = []
    for e in entries[: limit if limit is not None else len(entries)]:
        if category in MULTI_TURN_CATEGORIES + EXTRA_MULTI_TURN:
            tasks.append(_multi_turn_task(w, category, e, answers[e["id"]]))
        elif category in NO_CALL_CATEGORIES:
            tasks.append(_no_call_task(w, category, e))
        else:
            answer = answers[e["id"]]
            options = tuple((tool_name(name), params) for item in answer for name, params in item.items())
            tasks.append(single_turn_task(category, e, _single_truth(answer), options))
    return tasks


def single_turn_task(
    category: str,
    entry: Mapping[str, Any],
    calls: Sequence[ToolCall],
    options: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> Task:
    """A one-turn task from a BFCL question entry and its gold calls (names made OpenAI-legal)."""
    docs = list(entry["function"])
    return Task(
        id=entry["id"],
        category=category,
        turns=entry["question"],
        tools=[openai_tool(d) for d in docs],
        ground_truth=[[ToolCall(tool_name(c.name), c.arguments) for c in calls]],
        names={tool_name(d["name"]): d["name"] for d in docs},
        options=options,
    )


def _no_call_task(wheel: str, category: str, e: Mapping[str, Any]) -> Task:
    """A task whose ground truth has no calls: one empty list per user turn."""
    docs = list(e.get("function") or ())
    for cls in e.get("involved_classes") or ():
        docs.extend(_read_lines(wheel, f"{_DATA}/multi_turn_func_doc/{_AGENTIC_DOCS[cls]}"))
    return Task(
        id=e["id"],
        category=category,
        turns=e["question"],
        tools=[openai_tool(d) for d in docs],
        ground_truth=[[] for _ in e["question"]],
        names={tool_name(d["name"]): d["name"] for d in docs},
    )


def _format_sensitivity(wheel: str, limit: int | None) -> list[Task]:
    """The tasks ``BFCL_v4_format_sensitivity.json`` names (by id, from their own categories)."""
    with zipfile.ZipFile(wheel) as zf:
        listed: dict[str, list[str]] = json.loads(zf.read(f"{_DATA}/BFCL_v4_format_sensitivity.json"))
    out: list[Task] = []
    for source, ids in listed.items():
        by_id = {t.id: t for t in load_tasks(source, wheel=Path(wheel))}
        out.extend(replace(by_id[i], category="format_sensitivity") for i in ids if i in by_id)
    return out[:limit] if limit is not None else out


def _multi_turn_task(wheel: str, category: str, e: Mapping[str, Any], truth: list[list[str]]) -> Task:
    classes = list(e["involved_classes"])
    excluded = set(e.get("excluded_function", ()))
    docs = [d for c in classes for d in class_docs(wheel, c) if d["name"] not in excluded]
    positional = {d["name"]: list((d.get("parameters") or {}).get("properties", {})) for d in docs}
    return Task(
        id=e["id"],
        category=category,
        turns=e["question"],
        tools=[openai_tool(d) for d in docs],
        ground_truth=[[parse_call(c, positional) for c in turn] for turn in truth],
        classes=classes,
        initial_config=e.get("initial_config", {}),
        long_context=category == "multi_turn_long_context",
        names={tool_name(d["name"]): d["name"] for d in docs},
        held_back={
            tool_name(n): int(turn) for turn, names in (e.get("missed_function") or {}).items() for n in names
        },
    )
