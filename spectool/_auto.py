"""``samples="auto"``: running estimates of α per tool, g, G and T, and λ chosen per turn.

The decision itself is :func:`spectool.model.choose_samples` (pure, the paper's Eq. 1–2); this
module only keeps the estimates it needs, from what the speculator sees:

* per model request: G (request to answer), the tools called (a request that called none counts
  as a "no call" outcome: drafting could not help it), and for each call whether a draft
  sample of this turn had proposed it in time (a hit) at the λ used;
* per draft: its seconds at its λ (g(λ) = g + (λ−1)·extra, least squares once two λ were seen);
* per tool run: its seconds (T per tool).

The per-sample hit chance p_τ of each tool is the maximum-likelihood fit of α(λ) = 1 − (1 −
p)^λ to its (λ, hit) records plus a few pseudo records at the pooled p of all tools (itself
fitted with one pseudo hit and one pseudo miss): a tool seen once, or never (agents whose tools
change per task), borrows what the drafter does on the others. Mutating tools have p = 0
(never drafted). If the choice is λ = 0, every
``explore_every``-th such turn still drafts one sample, so the estimates can recover when the
drafter (or the workload) improves.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from .model import SampleChoice, ToolOdds, choose_samples

__all__ = ["AutoSamples", "fit_per_sample"]

_GRID = [i / 200 for i in range(1, 200)]
NO_CALL = "\x00no call"


def fit_per_sample(records: Iterable[tuple[int, bool]], prior: float = 0.5, weight: float = 2.0) -> float:
    """Maximum-likelihood p of α(λ) = 1 − (1 − p)^λ from (λ, hit) records, plus ``weight``
    pseudo records at λ = 1 of which a share ``prior`` are hits."""
    counts: dict[tuple[int, bool], float] = defaultdict(float)
    counts[(1, True)] += weight * prior
    counts[(1, False)] += weight * (1.0 - prior)
    for lam, hit in records:
        if lam > 0:
            counts[(lam, bool(hit))] += 1

    def loglik(p: float) -> float:
        total = 0.0
        for (lam, hit), n in counts.items():
            miss_all = (1.0 - p) ** lam
            total += n * (math.log(1.0 - miss_all) if hit else lam * math.log(1.0 - p))
        return total

    return max(_GRID, key=loglik)


class _Mean:
    """A running mean over the last ``n`` values."""

    def __init__(self, n: int = 64) -> None:
        self.values: deque[float] = deque(maxlen=n)

    def add(self, x: float) -> None:
        self.values.append(x)

    def get(self, default: float = 0.0) -> float:
        return sum(self.values) / len(self.values) if self.values else default


class AutoSamples:
    """Running estimates for one session, and the λ they call for."""

    def __init__(self, max_samples: int = 9, cost_per_sample_s: float = 0.0, explore_every: int = 8,
                 window: int = 200) -> None:
        self.max_samples, self.cost_per_sample_s = max_samples, cost_per_sample_s
        self.explore_every = explore_every
        self.calls: dict[str, int] = defaultdict(int)  # tool (or NO_CALL) -> model requests
        self.hits: dict[str, deque[tuple[int, bool]]] = defaultdict(lambda: deque(maxlen=window))
        self.speculable: dict[str, bool] = {}
        self.G = _Mean()
        self.T: dict[str, _Mean] = defaultdict(_Mean)
        self.drafts: deque[tuple[int, float]] = deque(maxlen=window)
        self.last: SampleChoice | None = None
        self._idle = 0  # consecutive turns the decision was λ = 0

    # -- observations -----------------------------------------------------------------------

    def observe_draft(self, samples: int, seconds: float) -> None:
        self.drafts.append((samples, seconds))

    def observe_tool(self, name: str, seconds: float) -> None:
        self.T[name].add(seconds)

    def observe_turn(self, samples: int, G: float | None, calls: Sequence[tuple[str, bool, bool]]) -> None:
        """One model request: λ used, seconds to the answer (None: unknown), and per call
        (tool, speculable, hit)."""
        if G is not None:
            self.G.add(G)
        if not calls:
            self.calls[NO_CALL] += 1
        for name, speculable, hit in calls:
            self.calls[name] += 1
            self.speculable[name] = speculable
            if samples > 0 and speculable:
                self.hits[name].append((samples, hit))

    # -- the decision -----------------------------------------------------------------------

    def g_line(self) -> tuple[float, float]:
        """(g at λ = 1, seconds per extra sample) from the drafts seen (least squares)."""
        if not self.drafts:
            return 0.0, 0.0
        xs = [lam - 1 for lam, _ in self.drafts]
        ys = [s for _, s in self.drafts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var) if var > 0 else 0.0
        return max(0.0, my - slope * mx), slope

    def odds(self) -> list[ToolOdds]:
        pooled = fit_per_sample([r for name in self.hits for r in self.hits[name]])
        out = []
        for name, n in self.calls.items():
            p = fit_per_sample(self.hits[name], pooled, 4.0) if self.speculable.get(name) else 0.0
            t = self.T[name].get() if name in self.T else 0.0
            out.append(ToolOdds(weight=n, per_sample=p, T=t))
        return out

    def choose(self) -> int:
        """λ for the next model request (1 until the first request has been seen)."""
        if not self.calls:
            return min(1, self.max_samples)
        g, extra = self.g_line()
        self.last = choose_samples(self.G.get(), g, self.odds(), g_per_extra_sample=extra,
                                   cost_per_sample_s=self.cost_per_sample_s, max_samples=self.max_samples)
        if self.last.samples > 0:
            self._idle = 0
            return self.last.samples
        self._idle += 1
        return 1 if self.explore_every and self._idle % self.explore_every == 0 and self.max_samples else 0
