"""BFCL's unused labelled sets as extra training data (issue 25, item 5): ``exec_*`` categories.

``bfcl-eval`` ships, under ``data/unused_datasets``, labelled single-turn sets its leaderboard no
longer scores: ``exec_simple`` (100), ``exec_multiple`` (50), ``exec_parallel`` (50) and
``exec_parallel_multiple`` (40), with ground truth as Python call text
(``calc_binomial_probability(n=20, k=5, p=0.6)``). They are read like the scored categories but
are **training data only**: they are not in :data:`._tasks.ALL_CATEGORIES`, so they never move a
scored task's split, and the train split of one keeps only the tasks whose content keys
(opening user message, gold calls) touch no dev or test group of the scored categories —
a twin of a test question under an exec id is left out.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spectool import ToolCall
from spectool.errors import ConfigError

from ._tasks import _DATA, Task, _read_lines, bfcl_wheel, single_turn_task

__all__ = ["UNUSED_CATEGORIES", "load_unused", "parse_exec_call", "unused_split"]

UNUSED_CATEGORIES = ("exec_simple", "exec_multiple", "exec_parallel", "exec_parallel_multiple")
_UNUSED = f"{_DATA}/unused_datasets"


_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _value(node: ast.expr) -> Any:
    """A literal, or arithmetic on numeric literals (the exec sets write ``p=1/6``)."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _value(node.left), _value(node.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            return _ARITHMETIC[type(node.op)](left, right)
        raise ValueError("arithmetic on non-numbers")
    return _json(ast.literal_eval(node))


def _json(value: Any) -> Any:
    """A literal as JSON would carry it: tuples become lists; sets, bytes, complex are refused."""
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def parse_exec_call(text: str, positional: Mapping[str, list[str]]) -> ToolCall:
    """``f(a=1, b=1/6)`` or ``f(1, 2)`` → ToolCall (positional names from the tool's docs)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a plain name")
        order = positional.get(node.func.id, [])
        args = {order[i]: _value(a) for i, a in enumerate(node.args)}
        args.update({kw.arg: _value(kw.value) for kw in node.keywords if kw.arg})
    except (SyntaxError, ValueError, IndexError, ZeroDivisionError) as exc:
        raise ConfigError(f"cannot parse BFCL exec ground-truth call {text!r}: {exc}") from exc
    return ToolCall(node.func.id, args)


def _positional(docs: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per tool, its parameter names in declared order (a call may pass them by position)."""
    return {d["name"]: list((d.get("parameters") or {}).get("properties") or {}) for d in docs}


@functools.cache
def load_unused(category: str, wheel: Path | None = None) -> tuple[Task, ...]:
    """Every task of one unused ``exec_*`` category."""
    if category not in UNUSED_CATEGORIES:
        raise ConfigError(f"unknown unused BFCL set {category!r} (known: {', '.join(UNUSED_CATEGORIES)})")
    w = str(wheel or bfcl_wheel())
    answers = {
        a["id"]: a["ground_truth"]
        for a in _read_lines(w, f"{_UNUSED}/possible_answer/BFCL_v4_{category}.json")
    }
    tasks = []
    for e in _read_lines(w, f"{_UNUSED}/question/BFCL_v4_{category}.json"):
        positional = _positional(e["function"])
        calls = [parse_exec_call(text, positional) for text in answers[e["id"]]]
        tasks.append(single_turn_task(category, e, calls))
    return tuple(tasks)


def unused_split(category: str, split: str) -> list[Task]:
    """The tasks of an unused set that ``split`` may hold: ``train`` (or ``all``) keeps those
    whose content keys touch no dev or test group of the scored categories; dev and test hold
    none (these sets are never scored)."""
    from ._splits import SPLITS, touches_held_out

    tasks = load_unused(category)
    if split == "all":
        return list(tasks)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)} or 'all'")
    if split != "train":
        raise ConfigError(f"{category} is training data only: it has no {split} split")
    return [t for t in tasks if not touches_held_out(t)]
