"""When drafting does not pay, stop drafting; probe now and then whether it pays again.

CAST sizes each tree by expected tokens per unit of measured forward cost, but even a
root-only tree pays for drafting (store lookups, suffix matches, scoring) and a drafted step
pays for the wider forward, mask and acceptance. On text the model writes fresh (QA, math)
that can make speculation slower than plain decoding. ``DraftGate`` compares what the two
kinds of step actually deliver — tokens per second of wall time, each an exponential moving
average of tokens and seconds — and decodes plainly while that is faster.

Both rates are measured, never assumed: while drafting, one step in ``probe_every`` is plain
(so the plain rate follows the machine's load; one in 4 × ``probe_every`` where drafting
wins by far); while not drafting, a drafted step is
probed after a back-off that doubles each time the probe loses (up to ``max_backoff``) and
resets when drafting wins again. A step meant to draft that found nothing to draft (every
tree its root: a cold store, fresh text, or trees CAST cut to nothing) ran plainly and says
nothing of what drafting delivers: ``empty_limit`` such steps in a row stop drafting, and a
probe that finds nothing counts as a lost one, so the lookups stop being paid step after step.
Pure arithmetic over the observations it is fed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DraftGate"]


@dataclass
class _Rate:
    """Tokens and seconds as EMAs: their ratio is a rate robust to one slow step."""

    alpha: float
    tokens: float = 0.0
    seconds: float = 0.0
    n: int = 0

    def add(self, tokens: int, seconds: float) -> None:
        a = 1.0 if self.n == 0 else self.alpha
        self.tokens += a * (tokens - self.tokens)
        self.seconds += a * (seconds - self.seconds)
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.tokens / self.seconds if self.n and self.seconds > 0 else None


@dataclass
class DraftGate:
    """Decides per step whether to draft (``should_draft``), learns from ``observe``.

    ``margin``: drafting stays on while its rate ≥ margin × the plain rate (a little below
    1 keeps it on through noise, since a step lost to a wrong "off" costs more than the
    few plain probes).
    """

    alpha: float = 0.25
    margin: float = 0.97
    probe_every: int = 12
    first_backoff: int = 4
    # 16, not more: a drafted probe that loses costs a fraction of one step (a wider forward),
    # while a gate shut by two unlucky early steps (a cold store) and probed every 64 steps
    # never sees the text turn predictable (code-1 and code-3: 122 of 128 steps plain)
    max_backoff: int = 16
    clear_win: float = 1.5
    empty_limit: int = 3
    _drafted: _Rate = field(init=False)
    _plain: _Rate = field(init=False)
    _on: bool = field(default=True, init=False)
    _since: int = field(default=0, init=False)  # steps since the last probe of the other kind
    _backoff: int = field(default=0, init=False)
    _empty: int = field(default=0, init=False)  # drafted steps in a row that drafted nothing

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1 or self.probe_every < 2 or self.first_backoff < 1 or self.empty_limit < 1:
            raise ValueError(
                "alpha in (0, 1], probe_every >= 2, first_backoff >= 1 and empty_limit >= 1 required"
            )
        self._drafted, self._plain = _Rate(self.alpha), _Rate(self.alpha)
        self._backoff = self.first_backoff

    @property
    def on(self) -> bool:
        """Whether drafting is the current mode (probes aside)."""
        return self._on

    def should_draft(self) -> bool:
        """This step: draft (True) or decode plainly (False)."""
        if self._on:
            # the first plain probe comes early so a losing policy is found out early
            due = self._plain.n == 0 and self._drafted.n >= 2
            return not (due or self._since >= self._probe_gap() - 1)
        return self._since >= self._backoff

    def observe(self, drafted: bool, tokens: int, seconds: float, empty: bool = False) -> None:
        """One finished step: how many tokens it emitted and its wall time; ``empty``: it was
        to draft but found nothing to draft (it ran plainly; neither rate learns from it)."""
        if drafted and empty:
            self._observe_empty()
            return
        self._empty = 0
        (self._drafted if drafted else self._plain).add(tokens, seconds)
        if drafted == self._on:
            self._since += 1
            if self._on and self._plain.n:
                self._decide()
            return
        self._since = 0  # a probe of the other kind
        was_on = self._on
        self._decide()
        if not was_on:
            # a drafted probe that lost: wait longer next time; one that won: start over
            self._backoff = self.first_backoff if self._on else min(2 * self._backoff, self.max_backoff)

    def _observe_empty(self) -> None:
        if not self._on:  # a probe with nothing to probe: lost, wait longer for the next
            self._since = 0
            self._backoff = min(2 * self._backoff, self.max_backoff)
            return
        self._since += 1
        self._empty += 1
        if self._empty >= self.empty_limit:
            self._on, self._since, self._empty = False, 0, 0

    def _probe_gap(self) -> int:
        """Drafted steps between plain probes: each probe forgoes a drafted step's gain, so
        where drafting wins by far (≥ ``clear_win``×) the plain rate is re-measured 4× less
        often."""
        d, p = self._drafted.value, self._plain.value
        clear = d is not None and p is not None and d >= self.clear_win * p
        return self.probe_every * (4 if clear else 1)

    def _decide(self) -> None:
        d, p = self._drafted.value, self._plain.value
        if d is None or p is None:
            return
        on = d >= self.margin * p
        if on != self._on:
            self._on, self._since = on, 0
