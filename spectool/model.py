"""The paper's performance model: client side (Eq. 1–3, Lemma 1) and engine side (Eq. 4–6).

Pure functions, no I/O. Times are in seconds, per turn unless a name says otherwise.

Client side (one agent, N turns, one tool call per turn)::

    G  main-model generation time        g  drafter (small model) time
    T  tool time                         α  hit rate: share of turns whose call was drafted

    T_std  = N (G + T)                                           (Eq. 1)
    T_spec = α N max{G, g + T} + (1 − α) N (G + T)               (Eq. 2)
    S      = T_std / T_spec                                      (Eq. 3)

Lemma 1 (for 0 < g < G): S grows with α; S ≤ S_max = (G + T) / max{G, g + T} (the value at
α = 1); and S_max ≤ 2 − 2g / (G + g + T) < 2, with S_max largest when T ≈ G − g.

Engine side (K turns; o per-request overhead; φ prefill and δ decode seconds per token; X_1
prompt tokens; per turn i: R_i reasoning tokens, t_i tool-call tokens, t_o,i tool-output
tokens, T_i tool time)::

    vanilla   2Ko + φ ΣX_i + δ Σ(R_i + t_i) + ΣT_i,   X_{i+1} = X_i + t_i + t_o,i     (Eq. 4)
    cached    2Ko + φ (X_1 + Σ(t_i + t_o,i)) + δ Σ(R_i + t_i) + ΣT_i                  (Eq. 5)
    spec*     (1−α) 2Ko + φ (X_1 + Σ(t_i + t_o,i))
              + δ (αK + ΣR_i + (1−α) Σt_i) + (1−α) ΣT_i                              (Eq. 6)

Eq. 6 is the engine with O1–O3: on a hit the call's tokens are verified in one step (O2) and
the output is appended to the live sequence without a new request or re-prefill (O3).

λ by the numbers (``samples="auto"``): with λ samples the hit rate is α(λ) = Σ_τ w_τ a_τ (1 − (1 −
p_τ)^λ) (w_τ: how often the model calls tool τ, p_τ: the chance one sample drafts its call, a_τ
the most any number of samples reaches: samples of one drafter are not independent), a
hit saves Eq. 1 − Eq. 2 = G + T_τ − max{G, g(λ) + T_τ} seconds (never below 0: a late draft
is no hit), and each sample costs ``c`` seconds' worth of drafter price. :func:`choose_samples`
picks the λ in 0…λ_max with the largest expected saving minus cost (0: do not draft).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import ConfigError

__all__ = [
    "EngineTimes",
    "EngineWorkload",
    "SampleChoice",
    "ToolOdds",
    "choose_samples",
    "client_speedup",
    "client_time_speculative",
    "client_time_standard",
    "engine_times",
    "hit_rate_at",
    "max_speedup",
    "required_hit_rate",
    "speedup_upper_bound",
]


def _check_times(**values: float) -> None:
    for name, v in values.items():
        if not isinstance(v, (int, float)) or math.isnan(v) or v < 0 or math.isinf(v):
            raise ConfigError(f"{name} must be a finite time ≥ 0 seconds, got {v!r}")


def _check_alpha(alpha: float) -> None:
    if not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha (hit rate) must be in [0, 1], got {alpha!r}")


def client_time_standard(G: float, T: float, turns: int = 1) -> float:
    """Eq. 1: wall time of ``turns`` sequential turns without speculation, N(G + T)."""
    _check_times(G=G, T=T)
    return turns * (G + T)


def client_time_speculative(G: float, g: float, T: float, alpha: float, turns: int = 1) -> float:
    """Eq. 2: wall time with client-side speculation, αN·max{G, g+T} + (1−α)N(G+T).

    On a hit the tool starts when the drafter answers (after g) and runs beside the main model;
    the turn ends when both are done. On a miss the tool starts after the main model.
    """
    _check_times(G=G, g=g, T=T)
    _check_alpha(alpha)
    return turns * (alpha * max(G, g + T) + (1.0 - alpha) * (G + T))


def client_speedup(G: float, g: float, T: float, alpha: float) -> float:
    """Eq. 3: S = (G + T) / (α·max{G, g+T} + (1−α)(G+T))."""
    std = client_time_standard(G, T)
    if std <= 0:
        raise ConfigError("G + T must be > 0 for a speedup to be defined")
    return std / client_time_speculative(G, g, T, alpha)


def max_speedup(G: float, g: float, T: float) -> float:
    """Lemma 1: S_max = (G + T) / max{G, g + T}, the speedup at α = 1."""
    return client_speedup(G, g, T, 1.0)


def speedup_upper_bound(G: float, g: float, T: float) -> float:
    """Lemma 1: the bound 2 − 2g/(G+g+T) ≥ S_max; below 2 whenever g > 0."""
    _check_times(G=G, g=g, T=T)
    if G + g + T <= 0:
        raise ConfigError("G + g + T must be > 0")
    return 2.0 - 2.0 * g / (G + g + T)


def required_hit_rate(G: float, g: float, T: float, target: float) -> float | None:
    """The smallest α reaching speedup ``target``; None if even α = 1 cannot.

    Solves (G+T) / (α·m + (1−α)(G+T)) = target for α, with m = max{G, g+T}.
    """
    if target <= 0:
        raise ConfigError(f"target speedup must be > 0, got {target!r}")
    if target <= 1.0:
        return 0.0
    s_max = max_speedup(G, g, T)
    if target > s_max + 1e-12:
        return None
    base, m = G + T, max(G, g + T)
    alpha = (base - base / target) / (base - m)
    return min(1.0, max(0.0, alpha))


@dataclass(frozen=True)
class EngineWorkload:
    """One agent episode for the engine model (Eq. 4–6); lists have one entry per turn."""

    prompt_tokens: int  # X_1
    reasoning_tokens: Sequence[int]  # R_i
    call_tokens: Sequence[int]  # t_i
    output_tokens: Sequence[int]  # t_o,i
    tool_times: Sequence[float]  # T_i, seconds
    overhead: float = 0.0  # o, seconds per request
    prefill_s_per_token: float = 0.0  # φ
    decode_s_per_token: float = 0.0  # δ

    def __post_init__(self) -> None:
        k = len(self.tool_times)
        lists = (self.reasoning_tokens, self.call_tokens, self.output_tokens)
        if any(len(x) != k for x in lists):
            raise ConfigError(
                "reasoning_tokens, call_tokens, output_tokens, tool_times need one entry per turn"
            )
        _check_times(
            overhead=self.overhead,
            prefill_s_per_token=self.prefill_s_per_token,
            decode_s_per_token=self.decode_s_per_token,
            prompt_tokens=self.prompt_tokens,
            **{f"tool_times[{i}]": t for i, t in enumerate(self.tool_times)},
        )

    @property
    def turns(self) -> int:
        return len(self.tool_times)


@dataclass(frozen=True)
class EngineTimes:
    """Eq. 4–6 evaluated for one workload and hit rate."""

    vanilla: float
    cached: float
    speculative: float
    parts: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def speedup_over_vanilla(self) -> float:
        return self.vanilla / self.speculative

    @property
    def speedup_over_cached(self) -> float:
        return self.cached / self.speculative


def engine_times(w: EngineWorkload, alpha: float) -> EngineTimes:
    """Eq. 4 (vanilla), Eq. 5 (prefix-cached) and Eq. 6 (engine-side speculation, O1–O3)."""
    _check_alpha(alpha)
    K, o, phi, delta = w.turns, w.overhead, w.prefill_s_per_token, w.decode_s_per_token
    R, t, to, Ti = (sum(w.reasoning_tokens), sum(w.call_tokens), sum(w.output_tokens), sum(w.tool_times))
    # X_i: the context each turn's request prefills from scratch without a prefix cache.
    contexts, x = [], w.prompt_tokens
    for ti, toi in zip(w.call_tokens, w.output_tokens):
        contexts.append(x)
        x += ti + toi
    vanilla = {"overhead": 2 * K * o, "prefill": phi * sum(contexts), "decode": delta * (R + t), "tools": Ti}
    once = phi * (w.prompt_tokens + t + to)
    cached = dict(vanilla, prefill=once)
    spec = {
        "overhead": (1 - alpha) * 2 * K * o,
        "prefill": once,
        "decode": delta * (alpha * K + R + (1 - alpha) * t),
        "tools": (1 - alpha) * Ti,
    }
    return EngineTimes(
        vanilla=sum(vanilla.values()),
        cached=sum(cached.values()),
        speculative=sum(spec.values()),
        parts={"vanilla": vanilla, "cached": cached, "speculative": spec},
    )


@dataclass(frozen=True)
class ToolOdds:
    """One tool in the λ decision: ``weight`` (share of the model's calls that go to it),
    ``per_sample`` (chance one draft sample predicts its call), ``T`` (its seconds) and
    ``ceiling`` (the hit rate no number of samples exceeds: α(λ) = ceiling·(1 − (1 − p)^λ))."""

    weight: float
    per_sample: float
    T: float
    ceiling: float = 1.0


@dataclass(frozen=True)
class SampleChoice:
    """The λ :func:`choose_samples` picked, and the expected figures of every λ it weighed."""

    samples: int
    alpha: float  # expected hit rate at that λ
    saved_s: float  # expected seconds saved per turn (Eq. 1 − Eq. 2)
    net_s: float  # saved minus the drafting cost, in seconds
    table: tuple[tuple[int, float, float, float], ...] = ()  # (λ, α, saved, net) per λ


def hit_rate_at(per_sample: float, samples: int) -> float:
    """α(λ) = 1 − (1 − p)^λ: the chance that at least one of λ independent samples hits."""
    if not 0.0 <= per_sample <= 1.0:
        raise ConfigError(f"per-sample hit chance must be in [0, 1], got {per_sample!r}")
    if samples < 0:
        raise ConfigError(f"samples must be ≥ 0, got {samples!r}")
    return 1.0 - (1.0 - per_sample) ** samples


def choose_samples(
    G: float,
    g: float,
    tools: Sequence[ToolOdds],
    *,
    g_per_extra_sample: float = 0.0,
    cost_per_sample_s: float = 0.0,
    max_samples: int = 9,
    runs_per_sample: float = 0.0,
    cost_per_run_s: float = 0.0,
) -> SampleChoice:
    """The λ ∈ {0 … max_samples} that maximises expected seconds saved per turn minus cost.

    ``G`` main-model seconds per turn; ``g`` drafter seconds for one sample and
    ``g_per_extra_sample`` more for each further one (g(λ) = g + (λ−1)·extra); ``tools`` the
    mix of calls the model makes (weights are normalised); ``cost_per_sample_s`` what one
    sample costs, in seconds of the agent's time. ``runs_per_sample`` speculative tool runs
    each sample starts and ``cost_per_run_s`` what one run costs: a run the main model then
    asks for replaces its own run, so only the expected wasted ones, λ·runs − α, are charged
    (a drafter that never hits pays for every run, and λ falls to 0). Ties go to the smaller
    λ (cheaper, fewer wasted runs); λ = 0 (do not draft) saves and costs nothing.
    """
    _check_times(
        G=G,
        g=g,
        g_per_extra_sample=g_per_extra_sample,
        cost_per_sample_s=cost_per_sample_s,
        runs_per_sample=runs_per_sample,
        cost_per_run_s=cost_per_run_s,
        **{f"T[{i}]": t.T for i, t in enumerate(tools)},
    )
    if max_samples < 0:
        raise ConfigError(f"max_samples must be ≥ 0, got {max_samples!r}")
    total = sum(max(0.0, t.weight) for t in tools)
    best = SampleChoice(0, 0.0, 0.0, 0.0)
    table = [(0, 0.0, 0.0, 0.0)]
    for lam in range(1, max_samples + 1):
        g_lam = g + (lam - 1) * g_per_extra_sample
        alpha = saved = 0.0
        for t in tools if total > 0 else ():
            w, a = max(0.0, t.weight) / total, min(1.0, max(0.0, t.ceiling)) * hit_rate_at(t.per_sample, lam)
            alpha += w * a
            saved += w * a * max(0.0, G + t.T - max(G, g_lam + t.T))
        net = saved - lam * cost_per_sample_s - cost_per_run_s * max(0.0, lam * runs_per_sample - alpha)
        table.append((lam, alpha, saved, net))
        if net > best.net_s + 1e-12:
            best = SampleChoice(lam, alpha, saved, net)
    return SampleChoice(best.samples, best.alpha, best.saved_s, best.net_s, tuple(table))
