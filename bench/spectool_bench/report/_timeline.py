"""A picture of agent turns with and without speculation: model generation, drafts, tool runs
and the wait that went away.

``TimelineRecorder`` is a :class:`spectool.Observer` (tool runs, drafts, hits) and a
:class:`spectool.RequestHook` (model calls); record one run with it, record the same run
without speculation, and ``draw_timeline(plain, fast, "turn.png")``::

    rec = TimelineRecorder()
    with rec.observing():
        async with spectool.speculative(client, tools, drafter, hooks=[rec]) as agent:
            await spectool.run_agent(agent, ...)
    timeline = rec.timeline()
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectool import Observer, RequestHook, add_observer, remove_observer

__all__ = ["Timeline", "TimelineRecorder", "draw_timeline"]


@dataclass(frozen=True)
class Span:
    lane: str  # "model", "draft", "tool (main path)", "tool (early)"
    label: str
    start: float
    end: float
    outcome: str = ""


@dataclass
class Timeline:
    """What happened in one run, in seconds from its first event."""

    spans: list[Span] = field(default_factory=list)
    served: list[tuple[float, str, str]] = field(default_factory=list)  # (time, tool, hit/join)

    @property
    def total(self) -> float:
        return max((s.end for s in self.spans), default=0.0)

    def lane(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.lane == name]


class TimelineRecorder(Observer, RequestHook):
    """Records tool runs, drafts, hits and model calls of the sessions it observes."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._spans: list[Span] = []
        self._served: list[tuple[float, str, str]] = []

    @contextmanager
    def observing(self) -> Iterator[TimelineRecorder]:
        add_observer(self)
        try:
            yield self
        finally:
            remove_observer(self)

    # -- Observer ---------------------------------------------------------------------------
    def tool_started(self, call: Any, spec: Any, speculative: bool) -> Any:
        return (call.name, speculative, self._clock())

    def tool_finished(self, token: Any, outcome: Any) -> None:
        name, speculative, start = token
        lane = "tool (early)" if speculative else "tool (main path)"
        self._spans.append(
            Span(lane, name, start, self._clock(), "error" if outcome.error is not None else "")
        )

    def resolved(self, kind: str, call: Any, spec: Any, *, started: float, outcome: Any = None) -> None:
        if kind in ("hit", "join"):
            self._served.append((self._clock(), call.name, kind))

    def draft_started(self, request: Any) -> Any:
        return self._clock()

    def draft_finished(self, token: Any, status: str, proposals: int, admitted: int) -> None:
        self._spans.append(Span("draft", f"{admitted} admitted", token, self._clock(), status))

    # -- RequestHook ------------------------------------------------------------------------
    async def wrap_request(self, request: Any, call_next: Any) -> Any:
        start = self._clock()

        def end() -> None:
            self._spans.append(Span("model", request.api, start, self._clock()))

        try:
            result = await call_next(request)
        except BaseException:
            end()
            raise
        if request.kwargs.get("stream"):
            return _TimedStream(result, end)  # generation ends with the stream, not the call
        end()
        return result

    def timeline(self) -> Timeline:
        """The recording so far, shifted so the first event is at 0."""
        t0 = min((s.start for s in self._spans), default=0.0)
        spans = [Span(s.lane, s.label, s.start - t0, s.end - t0, s.outcome) for s in self._spans]
        return Timeline(sorted(spans, key=lambda s: s.start), [(t - t0, n, k) for t, n, k in self._served])


class _TimedStream:
    """An SDK stream passed through; ``on_end`` runs once it is exhausted or abandoned."""

    def __init__(self, stream: Any, on_end: Any) -> None:
        self._stream, self._on_end, self._ended = stream, on_end, False

    async def __aiter__(self) -> Any:
        try:
            async for event in self._stream:
                yield event
        finally:
            if not self._ended:
                self._ended = True
                self._on_end()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


LANES = ["model", "draft", "tool (early)", "tool (main path)"]
COLORS = {"model": "#4c72b0", "draft": "#dd8452", "tool (early)": "#55a868", "tool (main path)": "#8172b3"}


def draw_timeline(plain: Timeline, fast: Timeline, path: str | Path, *, title: str | None = None) -> Path:
    """Two stacked pictures of the same run, without and with speculation, on one time axis;
    the wait that went away is shaded on the faster one. Writes a PNG; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(plain.total, fast.total) * 1.02 or 1.0
    fig, axes = plt.subplots(2, 1, figsize=(10, 4.6), sharex=True)
    for ax, tl, name in ((axes[0], plain, "without speculation"), (axes[1], fast, "with speculation")):
        for row, lane in enumerate(LANES):
            bars = [(s.start, max(s.end - s.start, end / 400)) for s in tl.lane(lane)]
            ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLORS[lane], edgecolor="white", linewidth=0.5)
        for t, _tool, _kind in tl.served:
            ax.plot([t], [LANES.index("tool (early)")], marker="v", color="black", markersize=5)
        ax.set_yticks(range(len(LANES)), LANES)
        ax.invert_yaxis()
        ax.set_xlim(0, end)
        ax.set_title(f"{name}: {tl.total:.2f} s", loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    saved = plain.total - fast.total
    if saved > 0:
        axes[1].axvspan(fast.total, plain.total, color="#c44e52", alpha=0.15)
        axes[1].text(
            (fast.total + plain.total) / 2,
            len(LANES) - 0.6,
            f"wait that went away\n{saved:.2f} s ({100 * saved / plain.total:.0f}%)",
            ha="center",
            va="bottom",
            fontsize=8,
            color="#c44e52",
        )
    axes[1].set_xlabel("seconds (▼: a call served by an early run)")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
