"""OpenTelemetry spans for drafts and tool runs: ``spectool.instrument()``.

Spans follow the GenAI semantic conventions for tool execution where they apply:

* every tool run (speculative or not): ``execute_tool {name}`` with ``gen_ai.operation.name =
  "execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.type = "function"``,
  ``gen_ai.tool.call.id`` (when the model gave one), ``error.type`` on failure, plus
  ``spectool.speculative`` and ``spectool.effect``;
* every main-path call: ``spectool.resolve {name}`` with ``spectool.outcome`` = hit / join /
  miss, and ``spectool.time_saved_s`` for hits and joins; a speculative read thrown away because
  a write in its scope came first: ``spectool.stale {name}`` with ``spectool.outcome = "stale"``;
* every draft: ``spectool.draft`` with ``spectool.draft.status`` (ok / timeout / error /
  cancelled), ``spectool.draft.samples``, ``.proposals`` and ``.admitted``.

opentelemetry is imported only here, only when ``instrument()`` is called.
"""

from __future__ import annotations

import time
from typing import Any

from ._observe import Observer, add_observer, remove_observer
from .errors import missing_extra

__all__ = ["instrument", "uninstrument"]

_installed: _SpanObserver | None = None


def _attrs(call: Any, spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": spec.name,
        "gen_ai.tool.type": "function",
        "spectool.effect": spec.effect.value,
        "spectool.scope": spec.scope,
    }
    if getattr(call, "id", None):
        out["gen_ai.tool.call.id"] = call.id
    return out


class _SpanObserver(Observer):
    def __init__(self, tracer: Any, status: Any, status_code: Any) -> None:
        self.tracer, self._status, self._code = tracer, status, status_code
        # The cache clock is monotonic; spans want wall-clock nanoseconds.
        self._offset = time.time() - time.monotonic()

    def _ns(self, clock: float) -> int:
        return int((clock + self._offset) * 1e9)

    def tool_started(self, call: Any, spec: Any, speculative: bool) -> Any:
        attrs = {**_attrs(call, spec), "spectool.speculative": speculative}
        return self.tracer.start_span(f"execute_tool {spec.name}", attributes=attrs)

    def tool_finished(self, span: Any, outcome: Any) -> None:
        if outcome.error is not None:
            span.set_attribute("error.type", type(outcome.error).__qualname__)
            span.set_status(self._status(self._code.ERROR, str(outcome.error)))
        span.set_attribute("spectool.cancelled", outcome.cancelled)
        span.end()

    def resolved(self, kind: str, call: Any, spec: Any, *, started: float, outcome: Any = None) -> None:
        name = f"spectool.stale {spec.name}" if kind == "stale" else f"spectool.resolve {spec.name}"
        attrs = {
            **_attrs(call, spec),
            "spectool.outcome": kind,
            "spectool.speculative": kind in ("hit", "join", "stale"),
        }
        if kind in ("hit", "join") and outcome is not None:
            attrs["spectool.time_saved_s"] = max(0.0, min(started, outcome.finished) - outcome.started)
        span = self.tracer.start_span(name, attributes=attrs, start_time=self._ns(started))
        span.end()

    def draft_started(self, request: Any) -> Any:
        return self.tracer.start_span(
            "spectool.draft",
            attributes={
                "spectool.draft.samples": request.samples,
                "spectool.draft.messages": len(request.messages),
            },
        )

    def draft_finished(self, span: Any, status: str, proposals: int, admitted: int) -> None:
        span.set_attribute("spectool.draft.status", status)
        span.set_attribute("spectool.draft.proposals", proposals)
        span.set_attribute("spectool.draft.admitted", admitted)
        span.end()


def instrument(tracer_provider: Any = None) -> Observer:
    """Emit OpenTelemetry spans for every session in this process (idempotent).

    ``tracer_provider`` defaults to the global one. Needs ``opentelemetry-api`` (the SDK to
    export: ``pip install 'spectool[tracing]'``). Returns the observer (for ``uninstrument``).
    """
    global _installed
    try:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode
    except ImportError as exc:
        raise missing_extra("opentelemetry", "tracing") from exc
    uninstrument()
    provider = tracer_provider or trace.get_tracer_provider()
    _installed = _SpanObserver(provider.get_tracer("spectool"), Status, StatusCode)
    return add_observer(_installed)


def uninstrument() -> None:
    """Stop emitting spans."""
    global _installed
    if _installed is not None:
        remove_observer(_installed)
        _installed = None
