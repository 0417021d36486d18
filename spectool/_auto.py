"""``samples="auto"``: running estimates of α per tool, g, G and T, and λ chosen per turn.

The decision itself is :func:`spectool.model.choose_samples` (pure, the paper's Eq. 1–2); this
module only keeps the estimates it needs, from what the speculator sees:

* per model request: G (request to answer), the tools called (a request that called none counts
  as a "no call" outcome: drafting could not help it), and for each call whether a draft
  sample of this turn had proposed it in time (a hit) at the λ used;
* per draft: its seconds at its λ (g(λ) = g + (λ−1)·extra, least squares once two λ were seen);
* per tool run: its seconds (T per tool);
* per drafted request: the speculative tool runs its samples started. Each run costs
  ``cost_per_run_s`` (default :data:`DEFAULT_RUN_COST_S`, never zero: a run is real work
  somewhere, and with a free run a drafter that never hits would be drafted for ever, since
  any α > 0 "saves" something); the expected wasted ones are charged against the saving, so
  such a drafter's α estimate falls until λ = 0 (issue 26: within ~25 turns for G = T = 1 s).

Hits follow α(λ) = a·(1 − (1 − p)^λ): p the chance one sample drafts the call, a the ceiling no
number of samples passes (a drafter's samples are not independent: a deterministic one's λ
samples add little). (a, p) is the maximum-likelihood fit to all tools' (λ, hit) records
(with one pseudo hit and one pseudo miss at λ = 1); each tool's ceiling is then scaled by its
own hit rate over the pooled one, shrunk towards 1 with 4 pseudo records, so a tool seen once,
or never (agents whose tools change per task), borrows what the drafter does on the others.
To tell a from p the records need more than one λ: when the choice is λ > 1, every 4th drafted
request uses λ = 1. Mutating tools have a = 0 (never drafted). If the choice is λ = 0, every
``explore_every``-th such turn still drafts one sample, so the estimates can recover when the
drafter (or the workload) improves.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from .model import SampleChoice, ToolOdds, choose_samples

__all__ = ["DEFAULT_RUN_COST_S", "AutoSamples", "fit_hits"]

#: What one speculative tool run costs, in seconds of the agent's time, unless the session
#: says otherwise (``run_cost=``): small beside a tool's latency, but never free.
DEFAULT_RUN_COST_S = 0.05

_P_GRID = [i / 50 for i in range(1, 50)]
_A_GRID = [i / 40 for i in range(1, 41)]
NO_CALL = "\x00no call"


def fit_hits(
    records: Iterable[tuple[int, bool]], prior: float = 0.5, weight: float = 2.0
) -> tuple[float, float]:
    """Maximum-likelihood (a, p) of α(λ) = a·(1 − (1 − p)^λ) from (λ, hit) records, plus
    ``weight`` pseudo records at λ = 1 of which a share ``prior`` are hits. Ties go to the
    larger p (fewer samples reach the ceiling)."""
    counts: dict[tuple[int, bool], float] = defaultdict(float)
    counts[(1, True)] += weight * prior
    counts[(1, False)] += weight * (1.0 - prior)
    for lam, hit in records:
        if lam > 0:
            counts[(lam, bool(hit))] += 1
    best, best_ll = (prior, 1.0), -math.inf
    for a in _A_GRID:
        for p in reversed(_P_GRID):
            ll = 0.0
            for (lam, hit), n in counts.items():
                alpha = min(1.0 - 1e-9, max(1e-9, a * (1.0 - (1.0 - p) ** lam)))
                ll += n * math.log(alpha if hit else 1.0 - alpha)
            if ll > best_ll + 1e-9:
                best, best_ll = (a, p), ll
    return best


class _Mean:
    """A running mean over the last ``n`` values."""

    def __init__(self, n: int = 64) -> None:
        self.values: deque[float] = deque(maxlen=n)

    def add(self, x: float) -> None:
        self.values.append(x)

    def get(self, default: float = 0.0) -> float:
        return sum(self.values) / len(self.values) if self.values else default


class AutoSamples:
    """Running estimates for one agent (its sessions share them), and the λ they call for."""

    def __init__(
        self,
        max_samples: int = 9,
        cost_per_sample_s: float = 0.0,
        explore_every: int = 8,
        window: int = 200,
        cost_per_run_s: float = DEFAULT_RUN_COST_S,
    ) -> None:
        self.max_samples, self.cost_per_sample_s = max_samples, cost_per_sample_s
        self.cost_per_run_s = cost_per_run_s
        self.runs: deque[tuple[int, int]] = deque(maxlen=window)  # (λ, speculative runs started)
        self.explore_every = explore_every
        self.calls: dict[str, int] = defaultdict(int)  # tool (or NO_CALL) -> model requests
        self.hits: dict[str, deque[tuple[int, bool]]] = defaultdict(lambda: deque(maxlen=window))
        self.speculable: dict[str, bool] = {}
        self.G = _Mean()
        self.T: dict[str, _Mean] = defaultdict(_Mean)
        self.drafts: deque[tuple[int, float]] = deque(maxlen=window)
        self.last: SampleChoice | None = None
        self._idle = 0  # consecutive turns the decision was λ = 0
        self._drafted = 0  # requests drafted at the chosen λ > 1 (every 4th probes λ = 1)

    # -- observations -----------------------------------------------------------------------

    def observe_draft(self, samples: int, seconds: float) -> None:
        self.drafts.append((samples, seconds))

    def observe_tool(self, name: str, seconds: float) -> None:
        self.T[name].add(seconds)

    def observe_turn(
        self, samples: int, G: float | None, calls: Sequence[tuple[str, bool, bool]], runs: int = 0
    ) -> None:
        """One model request: λ used, seconds to the answer (None: unknown), per call (tool,
        speculable, hit), and the speculative tool runs its drafts started."""
        if samples > 0:
            self.runs.append((samples, runs))
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
        slope = (
            max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var) if var > 0 else 0.0
        )
        return max(0.0, my - slope * mx), slope

    def runs_per_sample(self) -> float:
        """Speculative tool runs one draft sample starts, on average (0 before any draft)."""
        samples = sum(lam for lam, _ in self.runs)
        return sum(r for _, r in self.runs) / samples if samples else 0.0

    def odds(self) -> list[ToolOdds]:
        records = [r for name in self.hits for r in self.hits[name]]
        a, p = fit_hits(records)
        rate = (sum(h for _, h in records) + 1.0) / (len(records) + 2.0)
        out = []
        for name, n in self.calls.items():
            own = self.hits[name]
            ratio = (sum(h for _, h in own) + 4.0 * rate) / (len(own) + 4.0) / rate
            ceiling = min(1.0, a * ratio) if self.speculable.get(name) else 0.0
            t = self.T[name].get() if name in self.T else 0.0
            out.append(ToolOdds(weight=n, per_sample=p, T=t, ceiling=ceiling))
        return out

    def choose(self) -> int:
        """λ for the next model request (1 until the first request has been seen)."""
        if not self.calls:
            return min(1, self.max_samples)
        g, extra = self.g_line()
        self.last = choose_samples(
            self.G.get(),
            g,
            self.odds(),
            g_per_extra_sample=extra,
            cost_per_sample_s=self.cost_per_sample_s,
            max_samples=self.max_samples,
            runs_per_sample=self.runs_per_sample(),
            cost_per_run_s=self.cost_per_run_s,
        )
        if self.last.samples > 0:
            self._idle = 0
            if self.last.samples > 1:
                self._drafted += 1
                if self._drafted % 4 == 0:
                    return 1  # a probe: records at λ = 1 tell the ceiling from the per-sample chance
            return self.last.samples
        self._idle += 1
        return 1 if self.explore_every and self._idle % self.explore_every == 0 and self.max_samples else 0
