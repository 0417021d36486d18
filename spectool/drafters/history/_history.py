"""HistoryDrafter: predict the next calls from earlier calls, at zero model cost.

Training-free and deterministic. The *tool* comes from n-gram counts over tool-name sequences
(this session's calls plus earlier sessions it has seen, stupid backoff), with words shared by
the latest user message and a tool's name/description as a weak prior. The *arguments* are
filled per parameter from evidence found in the conversation (:mod:`._evidence`); a tool
whose required parameters cannot all be filled is not proposed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..._types import DraftRequest, ToolCall
from ...errors import ConfigError
from .._common import assistant_calls, message_text, tool_schemas
from ._evidence import Evidence, collect_evidence
from ._flows import Flows, mine_flows

__all__ = ["HistoryDrafter"]

_START = "<s>"
_WORD = re.compile(r"[a-z0-9]+")
# Words too common in requests and tool names to say which tool is meant.
_STOP = frozenset(
    "a an and are as at be by can do does for from get give i in is it me my of on "
    "or please set show tell the this to what which with you".split()
)


class HistoryDrafter:
    """n-gram next-tool prediction with arguments carried over from the conversation.

    ``order``: n of the n-grams (≥ 1). ``remember``: learn each session's call sequence (keyed
    by its first user message) so later sessions benefit. ``corpus``: known name sequences.
    ``variants``: alternative argument fillings per tool when λ allows. ``flows``: data flow
    mined from earlier sessions (:func:`~spectool.drafters.history._flows.mine_flows`; see
    :meth:`from_traces`). ``fan_out``: at the start of a turn, up to this many parallel calls of
    the top tool, each taking the user's next unused literals ("for 10, 20 and 30 years"); they
    form the first sample together.
    """

    def __init__(
        self,
        *,
        order: int = 3,
        remember: bool = True,
        max_sessions: int = 1000,
        corpus: Iterable[Sequence[str]] = (),
        variants: int = 2,
        flows: Flows | None = None,
        fan_out: int = 2,
    ) -> None:
        if order < 1 or max_sessions < 0 or variants < 1:
            raise ConfigError("order and variants must be ≥ 1, max_sessions ≥ 0")
        self.order = order
        self.remember = remember
        self.max_sessions = max_sessions
        self.variants = variants
        self.flows = flows
        self.fan_out = fan_out
        self._corpus = [list(seq) for seq in corpus]
        self._sessions: OrderedDict[str, list[str]] = OrderedDict()

    @classmethod
    def from_traces(cls, traces: Iterable[Sequence[Mapping[str, Any]]], **options: Any) -> HistoryDrafter:
        """A drafter primed with the control flow and data flow of finished conversations
        (Chat Completions message lists: user turns, assistant calls, tool outputs)."""
        flows = mine_flows(traces)
        return cls(corpus=[*options.pop("corpus", ()), *flows.sequences], flows=flows, **options)

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        return self.predict(request)

    def predict(self, request: DraftRequest) -> list[ToolCall]:
        """The synchronous core of :meth:`propose` (pure given the drafter's memory)."""
        tools = tool_schemas(request.tools)
        if not tools:
            return []
        history = [c for m in request.messages if m.get("role") == "assistant" for c in assistant_calls(m)]
        names = [c.name for c in history]
        session = _session_key(request.messages)
        turn_start = bool(request.messages) and request.messages[-1].get("role") == "user"
        ranked = self.rank_tools(
            names, _latest_user_text(request.messages), tools, session, word_weight=3.0 if turn_start else 1.0
        )
        if self.remember and session is not None and names:
            self._sessions[session] = names
            self._sessions.move_to_end(session)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        evidence = collect_evidence(request.messages)
        done = set(map(_tag, _trailing_run(request.messages)))  # an agent seldom repeats what it just did
        per_tool: list[list[ToolCall]] = []
        for name in ranked:
            fills = _fillings(name, tools[name]["parameters"], evidence, self.variants + 2, self.flows)
            fills = [f for f in fills if _tag(f) not in done][: self.variants]
            if fills:
                per_tool.append(fills)
        fan_out = self.fan_out if turn_start else 0
        out, limit = open_with_fan_out(per_tool, ranked, tools, evidence, fan_out, request.samples)
        for round_ in range(self.variants):  # best filling of every tool first, then alternatives
            for fills in per_tool:
                if round_ < len(fills) and len(out) < limit and fills[round_] not in out:
                    out.append(fills[round_])
        return out

    def rank_tools(
        self,
        names: Sequence[str],
        user_text: str,
        tools: Mapping[str, Any],
        session: str | None = None,
        word_weight: float = 1.0,
    ) -> list[str]:
        """Offered tool names by score (n-gram backoff + word overlap), best first; ties by name.

        ``word_weight`` scales the share of the request's words a tool's name and description
        cover; at the start of a turn the request says more than the previous turns' order.
        """
        sequences = [s for k, s in self._sessions.items() if k != session] + self._corpus
        sequences.append(list(names))
        context = [_START, *names]
        scores: defaultdict[str, float] = defaultdict(float)
        for k in range(min(self.order - 1, len(context)), -1, -1):
            weight = 0.4 ** (min(self.order - 1, len(context)) - k)
            tail = tuple(context[len(context) - k :]) if k else ()
            nexts = _next_counts(sequences, tail)
            total = sum(nexts.values())
            for name, count in nexts.items():
                if name in tools:
                    scores[name] += weight * count / total
        words = _words(user_text)
        for name, body in tools.items():
            tool_words = _words(f"{name} {body['description']}".replace("_", " "))
            if words and tool_words:  # the request's own words: decisive when history is thin
                scores[name] += word_weight * len(words & tool_words) / len(tool_words)
        return sorted((n for n in tools if scores[n] > 0), key=lambda n: (-scores[n], n))


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def _next_counts(sequences: Sequence[Sequence[str]], tail: tuple[str, ...]) -> Counter[str]:
    """How often each name follows ``tail`` (``()``: unigram counts) in the padded sequences."""
    counts: Counter[str] = Counter()
    for seq in sequences:
        padded = [_START, *seq]
        k = len(tail)
        for i in range(max(k, 1), len(padded)):
            if tuple(padded[i - k : i]) == tail:
                counts[padded[i]] += 1
    return counts


def _fan_out(name: str, params: Mapping[str, Any], evidence: Evidence, most: int) -> list[ToolCall]:
    """Further calls of ``name`` after its best filling, each from literals no earlier call took.

    Stops at the first filling that takes no new literal (nothing left to spread)."""
    taken: set[int] = set()
    first = _fillings(name, params, evidence, 1, taken=taken)
    if not first:
        return []
    out: list[ToolCall] = []
    seen = [first[0]]
    for _ in range(most):
        before = len(taken)
        fills = _fillings(name, params, evidence, 1, taken=taken)
        if not fills or len(taken) == before or fills[0] in seen:
            break
        seen.append(fills[0])
        out.append(fills[0])
    return out


def open_with_fan_out(
    per_tool: Sequence[Sequence[ToolCall]],
    ranked: Sequence[str],
    tools: Mapping[str, Any],
    evidence: Evidence,
    fan_out: int,
    samples: int,
) -> tuple[list[ToolCall], int]:
    """The drafts to open with and how many to make in all: with ``fan_out`` (a turn's start),
    the top tool's best filling (``per_tool[0][0]``) and up to ``fan_out`` further calls of it
    (:func:`_fan_out`), made beside λ; else none, λ in all."""
    parallel: list[ToolCall] = []
    if ranked and fan_out:
        parallel = _fan_out(ranked[0], tools[ranked[0]]["parameters"], evidence, fan_out)
    limit = max(1, int(samples)) + len(parallel)
    if per_tool and parallel and per_tool[0][0].name == ranked[0]:
        return [per_tool[0][0], *parallel], limit
    return [], limit


def _fillings(
    name: str,
    params: Mapping[str, Any],
    evidence: Evidence,
    variants: int,
    flows: Flows | None = None,
    taken: set[int] | None = None,
) -> list[ToolCall]:
    """:func:`fill_arguments` from the conversation's evidence and the mined flows."""

    def options(pname: str, schema: Mapping[str, Any], taken: set[int]) -> list[Any]:
        mined = flows.sources(name, pname) if flows is not None else ()
        return evidence.candidates(pname, schema, taken, mined)

    return fill_arguments(name, params, options, variants, taken)


def fill_arguments(
    name: str,
    params: Mapping[str, Any],
    options_of: Callable[[str, Mapping[str, Any], set[int]], list[Any]],
    variants: int,
    taken: set[int] | None = None,
) -> list[ToolCall]:
    """Up to ``variants`` calls of ``name`` from each parameter's ranked candidates
    (``options_of(parameter, schema, taken)``, best first): the best of each, then the next
    ones of each required parameter in turn; [] when a required parameter has none. ``taken``:
    user literals earlier calls used (not offered again); the ones this filling uses are added."""
    props = params.get("properties") or {}
    required = [p for p in params.get("required") or () if p in props]
    chosen: dict[str, list[Any]] = {}
    taken = set() if taken is None else taken  # a user literal fills one parameter of a call, not two
    used: list[Any] = []  # values earlier parameters took: two parameters rarely share one value
    for pname, pschema in props.items():
        options = options_of(pname, pschema if isinstance(pschema, Mapping) else {}, taken)
        options = [o for o in options if o.value not in used] + [o for o in options if o.value in used]
        if pname in required and not options:
            return []
        # Optional parameters take named evidence, or a number the user wrote and nobody used.
        strong = options if pname in required else [o for o in options if _strong(o)]
        if strong:
            chosen[pname] = [o.value for o in strong]
            used.append(strong[0].value)
            if strong[0].literal_id is not None:
                taken.add(strong[0].literal_id)
    first = {p: v[0] for p, v in chosen.items()}
    calls = [ToolCall(name, first)]
    for pname in (p for p in required if len(chosen.get(p, ())) > 1):
        for alt in chosen[pname][1:]:
            if len(calls) >= variants:
                return calls
            calls.append(ToolCall(name, {**first, pname: alt}))
    return calls


def _strong(option: Any) -> bool:
    value = option.value
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return bool(option.strength >= 2 or (option.literal_id is not None and numeric))


def _tag(call: ToolCall) -> str:
    return call.name + json.dumps(dict(call.arguments), sort_keys=True, default=repr)


def _trailing_run(messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """This turn's latest calls, as long as they name one tool (``zip(A)``, ``zip(B)``): a
    call of another tool in between may have changed what a repeat would return."""
    out: list[ToolCall] = []
    for m in reversed(messages):
        if m.get("role") == "user":
            break
        for call in reversed(assistant_calls(m)) if m.get("role") == "assistant" else ():
            if out and call.name != out[0].name:
                return out
            out.append(call)
    return out


def _latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return message_text(m.get("content"))
    return ""


def _session_key(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for m in messages:
        if m.get("role") == "user":
            text = json.dumps(message_text(m.get("content")))
            return hashlib.sha256(text.encode()).hexdigest()[:16]
    return None
