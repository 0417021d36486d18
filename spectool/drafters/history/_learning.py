"""LearningDrafter: mining that learns as the agent runs, from nothing or from traces.

Each request shows the conversation so far. The drafter mines it (:func:`._patterns.mine`)
and keeps the result per session (keyed by the first user message), so every finished
conversation's plan, flows, shapes and anchors are what the next sessions draft from;
a session's own counts are left out while it drafts for itself. Memory is bounded: the
latest ``max_sessions`` sessions are kept (the oldest one's counts are taken away) and one
conversation adds at most :data:`~._patterns.MAX_CALLS` calls. ``traces`` (finished
conversations) prime it and are never dropped.

Patterns hold tool and parameter names, value shapes and the words around values the user
wrote, not the values; still, nothing is written anywhere unless ``path`` names a file: then
the patterns are read from it at start and written to it (atomically) each time a session
is superseded by another and on :meth:`save`.

The tool comes from the plan context (:mod:`._plan`) plus the request's words; the
arguments from :func:`._values.rank_values`; a tool whose required parameters cannot all be
filled is not proposed; λ > 1 goes to the next-best distinct values, then the next tools.
:func:`learning_drafter` gives one drafter per scope (agent or tenant) for the process, so
``drafter="learning"`` in every session of a process learns across them.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._types import DraftRequest, ToolCall
from ...errors import ConfigError
from .._common import assistant_calls, message_text, tool_schemas
from ._evidence import Evidence, collect_evidence
from ._flows import read_output, value_tag
from ._history import (
    _latest_user_text,
    _session_key,
    _tag,
    _trailing_run,
    _words,
    fill_arguments,
    open_with_fan_out,
)
from ._patterns import Patterns, mentioned_records, mine
from ._plan import events_of, own_plan, plan_scores
from ._records import record_fillings
from ._shapes import spans
from ._values import RULES, ValueContext, rank_values

__all__ = ["LearningDrafter", "learning_drafter"]

#: weight of the request's words beside a plan that has seen the context
PLAN_WORDS = 0.2
#: word weights the drafter chooses among, by which ranked the called tools first most often
WORD_WEIGHTS = (0.2, 0.5, 1.0, 3.0)
#: a plan whose best offered tool scores less than this (a share of what followed) is unsure
UNSURE = 0.2
#: calls of a tool seen filled from one record before its calls are filled record by record
MIN_RECORD_USES = 2
#: data-flow sources below this share of a parameter's uses are not offered as candidates
MIN_SHARE = 0.1

#: a request's tool scores: (the plan's, the request's words')
Signals = tuple[dict[str, float], dict[str, float]]


class LearningDrafter:
    """Mined plan context + value selection, learning from every conversation it drafts for.

    ``traces``: finished conversations to start from. ``max_sessions``: sessions remembered
    (bounded memory). ``path``: a JSON file to read and keep the patterns in (None: memory
    only). ``variants``: fillings per tool; ``fan_out``: parallel calls of the top tool at a
    turn's start; ``rules``: the value rules on (:data:`._values.RULES`); ``plan``: use the
    plan context (else only the request's words rank tools).
    """

    def __init__(
        self,
        traces: Iterable[Sequence[Mapping[str, Any]]] = (),
        *,
        max_sessions: int = 500,
        path: str | os.PathLike[str] | None = None,
        variants: int = 3,
        fan_out: int = 2,
        rules: Iterable[str] = RULES,
        plan: bool = True,
    ) -> None:
        if max_sessions < 0 or variants < 1 or fan_out < 0:
            raise ConfigError("max_sessions and fan_out must be ≥ 0, variants ≥ 1")
        unknown = set(rules) - RULES
        if unknown:
            raise ConfigError(f"unknown value rule(s) {sorted(unknown)}; known: {sorted(RULES)}")
        self.max_sessions, self.variants, self.fan_out = max_sessions, variants, fan_out
        self.rules, self.plan = frozenset(rules), plan
        self.plan_words = PLAN_WORDS
        self._weights: dict[bool, dict[float, int]] = {
            s: dict.fromkeys(WORD_WEIGHTS, 0) for s in (True, False)
        }
        self._pending: OrderedDict[str, tuple[int, bool, dict[str, float], dict[str, float], dict[str, Any]]]
        self._pending = OrderedDict()
        self.path = Path(path) if path is not None else None
        self.patterns = Patterns()  # primed + every remembered session
        self._sessions: OrderedDict[str, Patterns] = OrderedDict()
        self._lock = threading.Lock()
        for messages in traces:
            self.patterns.add(mine(messages))
        if self.path is not None and self.path.exists():
            self._load(self.path)

    # -- learning -----------------------------------------------------------------------------

    def learn(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Take one conversation (finished or so far) into the patterns, replacing what its
        session gave before."""
        session = _session_key(messages)
        if session is None:
            return
        with self._lock:
            fresh = self._forget(session) is None
            superseded = fresh and bool(self._sessions)  # a new session: the others are likely done
            mined = mine(messages)
            self._sessions[session] = mined
            self.patterns.add(mined)
            while len(self._sessions) > self.max_sessions:
                _, old = self._sessions.popitem(last=False)
                self.patterns.add(old, -1)
        if self.path is not None and superseded:
            self.save()

    def _forget(self, session: str) -> Patterns | None:
        old = self._sessions.pop(session, None)
        if old is not None:
            self.patterns.add(old, -1)
        return old

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the patterns to ``path`` (default: the drafter's own) atomically."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ConfigError("LearningDrafter.save needs a path (none was given)")
        with self._lock:
            data = json.dumps({"version": 1, "patterns": self.patterns.to_json()})
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, target)
        return target

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
            loaded = Patterns.from_json(data["patterns"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"cannot read the learning drafter's patterns from {path}: {exc}") from exc
        self.patterns.add(loaded)

    # -- drafting -----------------------------------------------------------------------------

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        return self.predict(request)

    def predict(self, request: DraftRequest) -> list[ToolCall]:
        """Drafts for the request from every other session's patterns; then learns from it."""
        session = _session_key(request.messages)
        with self._lock:
            own = self._forget(session) if session is not None else None
            try:
                tools = tool_schemas(request.tools)
                # the plan and the words, read once for scoring the last request and for this one
                signals = self._signals(request.messages, tools) if tools else ({}, {})
                self._weigh(session, request.messages, tools, signals)
                out = self._draft(request, tools, signals) if tools else []
            finally:
                if own is not None and session is not None:  # back until learn() replaces it
                    self._sessions[session] = own
                    self.patterns.add(own)
        self.learn(request.messages)
        return out

    def _draft(self, request: DraftRequest, tools: Mapping[str, Any], signals: Signals) -> list[ToolCall]:
        messages = request.messages
        turn_start = bool(messages) and messages[-1].get("role") == "user"
        ranked = self.rank_tools(signals, tools, turn_start)
        evidence = collect_evidence(messages)
        ctx = value_context(messages)
        done = set(map(_tag, _trailing_run(messages)))
        per_tool: list[list[ToolCall]] = []
        need = max(1, int(request.samples)) + 1  # tools filled: enough for λ, not every offered one
        for name in ranked:
            if len(per_tool) >= need:
                break
            walked, lead = self._record_calls(name, tools[name]["parameters"], messages)
            fills = [
                f
                for f in self._fillings(name, tools[name]["parameters"], evidence, ctx)
                if _tag(f) not in done
            ]
            # records first where most calls were filled from one; else after the best filling
            fills = walked + fills if lead else fills[:1] + walked + fills[1:]
            fills = [f for i, f in enumerate(fills) if f not in fills[:i]]
            if fills:
                per_tool.append(fills[: self.variants])
        fan_out = self.fan_out if turn_start else 0
        out, limit = open_with_fan_out(per_tool, ranked, tools, evidence, fan_out, request.samples)
        # the top tool's best fillings first (λ > 1: its next-best distinct values), then the
        # other tools' best, then their alternatives
        order = [(0, r) for r in range(len(per_tool[0]))] if per_tool else []
        order += [(t, 0) for t in range(1, len(per_tool))]
        order += [(t, r) for r in range(1, self.variants) for t in range(1, len(per_tool))]
        for t, r in order:
            if r < len(per_tool[t]) and len(out) < limit and per_tool[t][r] not in out:
                out.append(per_tool[t][r])
        return out

    def rank_tools(self, signals: Signals, tools: Mapping[str, Any], turn_start: bool) -> list[str]:
        """Offered tools by plan score plus the request's words (:meth:`_signals`), best first;
        ties by name. The words' weight beside the plan is the one that has ranked the called
        tool first most often so far (:meth:`_weigh`), per turn start / within a turn."""
        plan, words = signals
        weight = self._word_weight(turn_start, plan) if plan else 1.0
        return _combine(plan, words, (3.0 if turn_start else 1.0) * weight, tools)

    def _signals(self, messages: Sequence[Mapping[str, Any]], tools: Mapping[str, Any]) -> Signals:
        events = events_of(messages)
        plan = plan_scores(self.patterns, events, own=own_plan(events)) if self.plan else {}
        plan = {n: v for n, v in plan.items() if n in tools}
        said = _words(_latest_user_text(messages))
        words: dict[str, float] = {}
        for name, body in tools.items():
            tool_words = _words(f"{name} {body['description']}".replace("_", " "))
            if said and tool_words and said & tool_words:
                words[name] = len(said & tool_words) / len(tool_words)
        return plan, words

    def _word_weight(self, turn_start: bool, plan: Mapping[str, float]) -> float:
        wins = self._weights[turn_start]
        best = max(wins.values())
        if best > 0:
            return min(w for w, n in wins.items() if n == best)
        # nothing scored yet: a plan that spreads over many tools knows little, the words decide
        return self.plan_words if max(plan.values()) >= UNSURE else 1.0

    def _weigh(
        self,
        session: str | None,
        messages: Sequence[Mapping[str, Any]],
        tools: Mapping[str, Any],
        signals: Signals,
    ) -> None:
        """Score the previous request of this session: which word weights would have ranked
        the tool called since first. Then keep this request's signals for the next."""
        last = self._pending.pop(session, None) if session is not None else None
        if last is not None and len(messages) > last[0]:
            called = [
                c.name
                for m in messages[last[0] :]
                if m.get("role") == "assistant"
                for c in assistant_calls(m)
            ]
            if called:
                start, plan, words, offered = last[1], last[2], last[3], last[4]
                for w in WORD_WEIGHTS:
                    ranked = _combine(plan, words, (3.0 if start else 1.0) * w, offered)
                    self._weights[start][w] += bool(ranked) and ranked[0] == called[0]
        if session is not None and self.plan:
            turn_start = bool(messages) and messages[-1].get("role") == "user"
            plan, words = signals
            if plan:
                self._pending[session] = (len(messages), turn_start, plan, words, dict.fromkeys(tools))
                while len(self._pending) > max(self.max_sessions, 1):
                    self._pending.popitem(last=False)

    def _record_calls(
        self, name: str, params: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
    ) -> tuple[list[ToolCall], bool]:
        """Fillings of ``name`` record by record (:mod:`._records`) where its calls were filled
        from one output record at least :data:`MIN_RECORD_USES` times, and whether they were
        in most calls (then the records lead)."""
        seen = self.patterns.records.get((name, ""))
        if "record" not in self.rules or not seen or seen[True] < MIN_RECORD_USES:
            return [], False
        fields = {
            p: [src[2] for src, _ in mined_sources(self.patterns, name, p) if src[0] == "out"]
            for p in (params.get("properties") or {})
        }
        found = record_fillings(name, params, messages, fields, self.variants)
        return [ToolCall(name, args) for args in found], seen[True] >= seen[False]

    def _fillings(
        self, name: str, params: Mapping[str, Any], evidence: Evidence, ctx: ValueContext
    ) -> list[ToolCall]:
        def options(pname: str, schema: Mapping[str, Any], taken: set[int]) -> list[Any]:
            mined = mined_sources(self.patterns, name, pname)
            return rank_values(name, pname, schema, evidence, taken, mined, self.patterns, ctx, self.rules)

        return fill_arguments(name, params, options, self.variants)


def _combine(
    plan: Mapping[str, float], words: Mapping[str, float], weight: float, tools: Mapping[str, Any]
) -> list[str]:
    out = {n: plan.get(n, 0.0) + weight * words.get(n, 0.0) for n in tools}
    return sorted((n for n in tools if out[n] > 0), key=lambda n: (-out[n], n))


def mined_sources(patterns: Patterns, tool: str, pname: str) -> list[tuple[tuple[str, ...], float]]:
    """Where values of ``tool``'s ``pname`` came from (not the user's words), with their shares."""
    total = patterns.uses.get((tool, pname), 0)
    counts = patterns.flows.get((tool, pname))
    if not total or not counts:
        return []
    return [
        (src, n / total) for src, n in counts.most_common() if n / total >= MIN_SHARE and src[0] != "user"
    ]


def value_context(messages: Sequence[Mapping[str, Any]]) -> ValueContext:
    """What the conversation says about values: the user's text, values used per tool, records linked."""
    user_text, index = "", 0
    used: set[tuple[str, str, str]] = set()
    linked: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "user":
            user_text += "\n" + message_text(m.get("content"))
            index = i
        elif role == "assistant":
            for call in assistant_calls(m):
                used.update((call.name, str(k), value_tag(v)) for k, v in call.arguments.items())
        elif role == "tool":
            linked |= mentioned_records(read_output(m.get("content")), user_text)
    return ValueContext(user_text, frozenset(used), frozenset(linked), index, tuple(spans(user_text)))


# -- one drafter per scope for the process ------------------------------------------------------

#: scopes kept at most (the least recently used goes)
MAX_SCOPES = 64
_scopes: OrderedDict[str, LearningDrafter] = OrderedDict()
_scopes_lock = threading.Lock()


def learning_drafter(
    scope: str = "default", *, path: str | os.PathLike[str] | None = None
) -> LearningDrafter:
    """The process's learning drafter for ``scope`` (an agent or a tenant), made on first use;
    every session that names it learns into the same patterns. ``path`` (first use only):
    where to keep them on disk."""
    if not isinstance(scope, str) or not scope:
        raise ConfigError(f"a learning drafter's scope is a non-empty string, got {scope!r}")
    with _scopes_lock:
        found = _scopes.get(scope)
        if found is None:
            found = _scopes[scope] = LearningDrafter(path=path)
        elif path is not None and found.path != Path(path):
            raise ConfigError(f"learning scope {scope!r} already keeps its patterns at {found.path}")
        _scopes.move_to_end(scope)
        while len(_scopes) > MAX_SCOPES:
            _scopes.popitem(last=False)
        return found
