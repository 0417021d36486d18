"""OpenTelemetry spans and metrics for drafts and tool runs: ``spectool.instrument()``.

Spans follow the GenAI semantic conventions as ``opentelemetry-util-genai`` emits them
(attribute names from ``opentelemetry-semantic-conventions``, schema 1.37.0):

* every real tool run, speculative or not: ``execute_tool {name}`` (INTERNAL), operation
  ``execute_tool``, with ``gen_ai.tool.name`` / ``.type`` / ``.description``,
  ``gen_ai.tool.call.id`` (the model's; for an early run the drafter's, or one spectool makes
  up, ``spectool-draft-…``), ``error.type`` on failure, ``spectool.speculative`` / ``.effect``;
  with content capture on, also ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``.
  The span is current while the tool runs, so the tool's own spans nest under it;
* every main-path call: ``spectool.resolve {name}``, operation ``spectool.resolve`` (not
  ``execute_tool``: a served call is counted once, by its run), ``spectool.outcome`` = hit /
  join / miss, ``spectool.time_saved_s``, and a link to the early run's span that served it;
  an early read thrown away as stale: ``spectool.stale {name}``;
* every draft: ``spectool.draft`` (current while the drafter runs; early runs it starts are its
  children) and, for a drafter backed by a model, a GenAI ``chat {model}`` (CLIENT) under it,
  unless the OpenAI SDK the drafter calls is instrumented: that instrumentation's ``chat``
  span is then the one (one request, one ``chat`` operation).

Metrics (meter ``spectool``): ``spectool.tool_cache.hits`` / ``.joins`` / ``.misses``,
``spectool.speculative.runs`` / ``.wasted``, ``spectool.time_saved`` (seconds).

opentelemetry is imported only here, only when ``instrument()`` is called.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import os
import sys
import time
import uuid
import weakref
from collections import OrderedDict
from typing import Any

from ._observe import Observer, add_observer, remove_observer
from .errors import missing_extra

__all__ = ["instrument", "uninstrument"]

#: The GenAI instrumentations' switch for recording message content (opt-in: arguments and
#: results may hold personal data).
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_LINKS_KEPT = 4096  # early-run span contexts kept for links from later resolve spans
#: The schema of the attribute names used (the one opentelemetry-util-genai's spans carry).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
#: The draft whose drafter is running: early runs it starts are its children, not the chat's.
_DRAFT: contextvars.ContextVar[Any] = contextvars.ContextVar("spectool_draft_context", default=None)

_installed: _SpanObserver | None = None


def _version() -> str:
    from . import __version__

    return __version__


def _openai_traced(drafter: Any) -> bool:
    """True when the drafter calls an OpenAI SDK client whose ``create`` an instrumentation
    wrapped (opentelemetry-instrumentation-openai-v2 and the like patch the class): that
    instrumentation records the request as a ``chat`` span; a second one would double count
    it in token and cost dashboards."""
    module = sys.modules.get("openai.resources.chat.completions")
    if module is None:
        return False
    state = getattr(drafter, "__dict__", {})
    client = state.get("_client") or state.get("client")
    if client is None:  # a client built later from base_url: an AsyncOpenAI
        cls: Any = module.AsyncCompletions if state.get("_base_url") else None
    else:
        cls = type(getattr(getattr(client, "chat", None), "completions", None))
    if cls is None or not issubclass(cls, (module.AsyncCompletions, module.Completions)):
        return False
    # wrapt's proxy, as the instrumentations patch (openai's own decorators use functools.wraps,
    # which sets __wrapped__ too: that is not a sign of instrumentation)
    wrapt = sys.modules.get("wrapt")
    wrapper = getattr(wrapt, "FunctionWrapper", None)
    return wrapper is not None and isinstance(inspect.getattr_static(cls, "create", None), wrapper)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


class _SpanObserver(Observer):
    def __init__(self, tracer: Any, meter: Any, otel: Any, capture_content: bool) -> None:
        self.tracer, self.otel, self.capture = tracer, otel, capture_content
        self.ga = otel.gen_ai
        self._runs: OrderedDict[int, tuple[Any, Any]] = OrderedDict()  # id(outcome) -> (weakref, ctx)
        # The cache clock is monotonic; spans want wall-clock nanoseconds.
        self._offset = time.time() - time.monotonic()
        counter = meter.create_counter
        self.m = {
            "hit": counter("spectool.tool_cache.hits", "{call}", "main-path calls served by a finished run"),
            "join": counter("spectool.tool_cache.joins", "{call}", "main-path calls that joined a run"),
            "miss": counter("spectool.tool_cache.misses", "{call}", "main-path calls run on the spot"),
            "runs": counter("spectool.speculative.runs", "{run}", "tool runs started early"),
            "wasted": counter("spectool.speculative.wasted", "{run}", "early runs never used"),
            "saved": counter("spectool.time_saved", "s", "tool seconds the main path did not wait"),
        }

    def _ns(self, clock: float) -> int:
        return int((clock + self._offset) * 1e9)

    def _tool(self, call: Any, spec: Any, operation: str, speculative: bool = False) -> dict[str, Any]:
        ga = self.ga
        out: dict[str, Any] = {
            ga.GEN_AI_OPERATION_NAME: operation,
            ga.GEN_AI_TOOL_NAME: spec.name,
            ga.GEN_AI_TOOL_TYPE: "function",
            "spectool.effect": spec.effect.value,
            "spectool.scope": spec.scope,
        }
        if spec.description:
            out[ga.GEN_AI_TOOL_DESCRIPTION] = spec.description
        if getattr(call, "id", None):
            out[ga.GEN_AI_TOOL_CALL_ID] = call.id
        elif speculative:  # the drafter gave none: one of ours, so the run can be found
            out[ga.GEN_AI_TOOL_CALL_ID] = f"spectool-draft-{uuid.uuid4().hex[:24]}"
        if self.capture:
            out[ga.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(call.arguments)
        return out

    def tool_started(self, call: Any, spec: Any, speculative: bool) -> Any:
        attrs = {**self._tool(call, spec, "execute_tool", speculative), "spectool.speculative": speculative}
        if speculative:
            self.m["runs"].add(1, {self.ga.GEN_AI_TOOL_NAME: spec.name})
        otel = self.otel
        parent = (_DRAFT.get() if speculative else None) or otel.context.get_current()
        span = self.tracer.start_span(
            f"execute_tool {spec.name}", context=parent, kind=otel.SpanKind.INTERNAL, attributes=attrs
        )
        # current while the tool runs (this task): its own spans are children of its run
        return span, otel.context.attach(otel.trace.set_span_in_context(span, parent))

    def tool_finished(self, token: Any, outcome: Any) -> None:
        span, attached = token
        self.otel.context.detach(attached)
        if outcome.error is not None:
            span.set_attribute(self.otel.ERROR_TYPE, type(outcome.error).__qualname__)
            span.set_status(self.otel.Status(self.otel.StatusCode.ERROR, str(outcome.error)))
        elif self.capture and not outcome.cancelled:
            span.set_attribute(self.ga.GEN_AI_TOOL_CALL_RESULT, _json(outcome.value))
        span.set_attribute("spectool.cancelled", outcome.cancelled)
        span.end()
        if outcome.speculative:  # a later resolve span links to the run that served it
            self._runs[id(outcome)] = (weakref.ref(outcome), span.get_span_context())
            while len(self._runs) > _LINKS_KEPT:
                self._runs.popitem(last=False)

    def _link(self, outcome: Any) -> list[Any]:
        kept = self._runs.get(id(outcome)) if outcome is not None else None
        if kept is None or kept[0]() is not outcome:  # an id reused after a run was freed
            return []
        return [self.otel.Link(kept[1], {"spectool.link": "early_run"})]

    def resolved(self, kind: str, call: Any, spec: Any, *, started: float, outcome: Any = None) -> None:
        name = f"spectool.stale {spec.name}" if kind == "stale" else f"spectool.resolve {spec.name}"
        attrs = {
            **self._tool(call, spec, "spectool.stale" if kind == "stale" else "spectool.resolve"),
            "spectool.outcome": kind,
            "spectool.speculative": kind in ("hit", "join", "stale"),
        }
        tool = {self.ga.GEN_AI_TOOL_NAME: spec.name}
        if kind in ("hit", "join", "miss"):
            self.m[kind].add(1, tool)
        if kind in ("hit", "join") and outcome is not None:
            saved = max(0.0, min(started, outcome.finished) - outcome.started)
            attrs["spectool.time_saved_s"] = saved
            self.m["saved"].add(saved, tool)
        links = self._link(outcome) if kind != "miss" else []
        span = self.tracer.start_span(name, attributes=attrs, start_time=self._ns(started), links=links)
        span.end()

    def wasted(self, call: Any, spec: Any, outcome: Any) -> None:
        self.m["wasted"].add(1, {self.ga.GEN_AI_TOOL_NAME: spec.name})

    def draft_started(self, request: Any) -> Any:
        otel = self.otel
        span = self.tracer.start_span(
            "spectool.draft",
            kind=otel.SpanKind.INTERNAL,
            attributes={
                self.ga.GEN_AI_OPERATION_NAME: "spectool.draft",
                "spectool.draft.samples": request.samples,
                "spectool.draft.messages": len(request.messages),
            },
        )
        ctx = otel.trace.set_span_in_context(span)
        # current while the drafter runs (this task); early runs started from it see _DRAFT
        return [span, otel.context.attach(ctx), _DRAFT.set(ctx)]

    def draft_by(self, token: Any, drafter: Any) -> None:
        model = getattr(drafter, "model", None)
        if token is None or not isinstance(model, str) or _openai_traced(drafter):
            return  # no model (the history drafter), or the instrumented SDK records the chat
        ga, otel = self.ga, self.otel
        parent = otel.trace.set_span_in_context(token[0])
        attrs = {
            ga.GEN_AI_OPERATION_NAME: "chat",
            ga.GEN_AI_REQUEST_MODEL: model,
            ga.GEN_AI_PROVIDER_NAME: getattr(drafter, "provider", None) or "openai",
            "spectool.drafter": type(drafter).__name__,
        }
        chat = self.tracer.start_span(
            f"chat {model}", context=parent, kind=otel.SpanKind.CLIENT, attributes=attrs
        )
        token.append((chat, otel.context.attach(otel.trace.set_span_in_context(chat, parent))))

    def draft_finished(self, token: Any, status: str, proposals: int, admitted: int) -> None:
        span, attached, draft_var, *chats = token
        for chat, chat_attached in reversed(chats):
            self.otel.context.detach(chat_attached)
            if status == "error":
                chat.set_attribute(self.otel.ERROR_TYPE, "drafter_error")
                chat.set_status(self.otel.Status(self.otel.StatusCode.ERROR, "drafter failed"))
            chat.end()
        _DRAFT.reset(draft_var)
        self.otel.context.detach(attached)
        span.set_attribute("spectool.draft.status", status)
        span.set_attribute("spectool.draft.proposals", proposals)
        span.set_attribute("spectool.draft.admitted", admitted)
        span.end()


class _Otel:
    """The opentelemetry names the observer uses, imported once by :func:`instrument`."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
        from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode

        self.trace, self.context, self.gen_ai, self.ERROR_TYPE = trace, context, gen_ai_attributes, ERROR_TYPE
        self.Link, self.SpanKind, self.Status, self.StatusCode = Link, SpanKind, Status, StatusCode


def instrument(
    tracer_provider: Any = None, *, meter_provider: Any = None, capture_content: bool | None = None
) -> Observer:
    """Emit OpenTelemetry spans and metrics for every session in this process (idempotent).

    Providers default to the global ones. ``capture_content``: record tool arguments and
    results on spans (default: ``$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).
    Needs ``pip install 'spectool[tracing]'``. Returns the observer (for ``uninstrument``).
    """
    global _installed
    try:
        from opentelemetry import metrics, trace

        otel = _Otel()
    except ImportError as exc:
        raise missing_extra("opentelemetry", "tracing") from exc
    uninstrument()
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"
    tracer = trace.get_tracer("spectool", _version(), tracer_provider, schema_url=SCHEMA_URL)
    meter = metrics.get_meter("spectool", _version(), meter_provider, schema_url=SCHEMA_URL)
    _installed = _SpanObserver(tracer, meter, otel, capture_content)
    return add_observer(_installed)


def uninstrument() -> None:
    """Stop emitting spans and metrics."""
    global _installed
    if _installed is not None:
        remove_observer(_installed)
        _installed = None
