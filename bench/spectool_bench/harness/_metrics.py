"""Metrics of one paired run, and the model's prediction from what was measured.

``time_saved_pct`` = 100·(T_base − T_spec)/T_base per agent, on the same tasks, tool outputs and
latency draws, then averaged over agents. ``predicted_speedup`` applies Eq. 2 step by step to
the baseline's measured G_i and T_i, the speculative run's hit rate α and mean drafter time g:

    T_pred = Σ_steps with a call [α·max{G_i, g + T_i} + (1 − α)(G_i + T_i)] + Σ_other steps G_i
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from ..report._ci import bootstrap_saved_ci, saved_pct
from ._agents import AgentResult

__all__ = [
    "PRICES",
    "engine_prediction",
    "predicted_speedup",
    "run_row",
    "samples_chosen",
    "transcript_digest",
]

#: USD per million tokens, overridable (``--price main=…,drafter=…``).
PRICES = {"main": 0.0, "drafter": 0.0}


def predicted_speedup(base: AgentResult, alpha: float, g: float) -> float:
    std = sum(base.G) + sum(base.T)
    pred = sum(alpha * max(G, g + T) + (1 - alpha) * (G + T) if T > 0 else G for G, T in zip(base.G, base.T))
    return std / pred if pred > 0 else 1.0


def _episodes(requests: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Requests grouped per (task, user turn): each group is one episode of the engine model."""
    groups: list[list[Mapping[str, Any]]] = []
    for r in requests:
        if groups and (groups[-1][0]["task"], groups[-1][0]["turn"]) == (r["task"], r["turn"]):
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def engine_prediction(base: AgentResult, alpha: float, phi: float, delta: float) -> dict[str, float]:
    """Eq. 4 (vanilla engine = the baseline) and Eq. 6 (engine-side) for one agent, from the
    baseline's measured requests: per user turn X_1 = first prompt, t_i = tokens generated for
    call i, t_o,i = growth of the next prompt beyond t_i (tool result + template), T_i = tool wait.
    φ, δ come from the engine's calibration; the per-request overhead 2o is the mean residual
    G − φX − δn of the baseline's requests (clamped at 0); R_i = 0 (no reasoning tokens: text
    before a call counts in t_i). The closing text request adds 2o + δn (+ φX in Eq. 4 only:
    Eq. 6 prefills the context once). ``eq6_no_o1_s`` is Eq. 6 for an engine without a prefix
    cache (the serving engine here): after a miss the next request re-prefills its context; it
    is the one ``speedup`` uses."""
    from spectool.model import EngineWorkload, engine_times

    reqs = base.requests
    if not reqs:
        return {"eq4_s": 0.0, "eq6_s": 0.0, "eq6_no_o1_s": 0.0, "speedup": 1.0, "overhead_s": 0.0}
    o2 = max(0.0, _mean([r["G"] - phi * r["prompt"] - delta * r["completion"] for r in reqs]))
    vanilla = spec = spec_o1 = 0.0
    for ep in _episodes(reqs):
        tool_steps = [i for i, r in enumerate(ep) if r["calls"]]
        to = [
            max(0, ep[i + 1]["prompt"] - ep[i]["prompt"] - ep[i]["completion"]) if i + 1 < len(ep) else 0
            for i in tool_steps
        ]
        w = EngineWorkload(
            prompt_tokens=ep[0]["prompt"],
            reasoning_tokens=[0] * len(tool_steps),
            call_tokens=[ep[i]["completion"] for i in tool_steps],
            output_tokens=to,
            tool_times=[ep[i]["T"] for i in tool_steps],
            overhead=o2 / 2,
            prefill_s_per_token=phi,
            decode_s_per_token=delta,
        )
        times = engine_times(w, alpha)
        # Without a prefix cache (this engine) a miss re-prefills the next request's context.
        grown = [
            alpha * (ep[i]["completion"] + t) + (1 - alpha) * ep[i + 1]["prompt"] if i + 1 < len(ep) else 0.0
            for i, t in zip(tool_steps, to)
        ]
        no_o1 = phi * (ep[0]["prompt"] + sum(grown)) - times.parts["speculative"]["prefill"]
        vanilla, spec_o1 = vanilla + times.vanilla, spec_o1 + times.speculative
        spec += times.speculative + no_o1
        last = ep[-1]
        if not last["calls"]:
            vanilla += o2 + phi * last["prompt"] + delta * last["completion"]
            spec, spec_o1 = spec + o2 + delta * last["completion"], spec_o1 + o2 + delta * last["completion"]
    return {
        "eq4_s": vanilla,
        "eq6_s": spec_o1,
        "eq6_no_o1_s": spec,
        # α = 0 answers nothing in place: Eq. 6 is Eq. 4, exactly (the two float sums differ
        # in their last bit, and a speedup of 0.9999999999999999 would read as a slowdown)
        "speedup": 1.0 if alpha == 0 or spec <= 0 else vanilla / spec,
        "overhead_s": o2,
    }


def model_curve(
    base: Sequence[AgentResult], ref: Sequence[AgentResult], g: float, steps: int = 20
) -> list[list[float]]:
    """[α, predicted time saved % against the sequential baseline] for α = 0 … 1: Eq. 2 applied
    to the reference run's measured G_i, T_i with drafter time ``g`` (α = 0 is the reference)."""
    out = []
    for k in range(steps + 1):
        a = k / steps
        saved = [
            100.0 * (b.wall_s - r.wall_s / predicted_speedup(r, a, g)) / b.wall_s
            for b, r in zip(base, ref)
            if b.wall_s
        ]
        out.append([a, _mean(saved)])
    return out


def samples_chosen(runs: Sequence[AgentResult]) -> dict[str, int]:
    """How many model requests drafted at each λ ("0": not drafted), over every agent's requests:
    with ``samples="auto"`` what the speculator chose, step by step (requests without a drafter
    are left out)."""
    counts: dict[int, int] = {}
    for r in runs:
        for req in r.requests:
            lam = req.get("samples")
            if isinstance(lam, int):
                counts[lam] = counts.get(lam, 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}


def _mean(xs: Sequence[float]) -> float:
    return fmean(xs) if xs else 0.0


def run_row(
    meta: Mapping[str, Any],
    base: Sequence[AgentResult],
    spec: Sequence[AgentResult],
    prices: Mapping[str, float] = PRICES,
    calibration: Any = None,
    reference: Sequence[AgentResult] | None = None,
    truth: Sequence[AgentResult] | None = None,
) -> dict[str, Any]:
    """One results.json run: ``meta`` (config, agents, samples, drafter, …) plus the metrics.
    With an engine ``calibration`` (φ, δ) every row also carries the engine model's Eq. 4 / Eq. 6
    prediction; for ``config == "engine"`` that is the row's ``predicted_speedup``.

    ``time_saved_pct`` is against the sequential baseline ``base``. With a ``reference`` run
    (eager dispatch alone) the row also has ``time_saved_vs_eager_pct``, and the model's
    prediction and the measured speedup are both taken over the reference: the drafter is
    credited only with what it adds to eager dispatch. The eager row itself (``spec`` is the
    reference) has no prediction: the paper's model has no term for eager dispatch.

    ``same`` compares the row's transcripts and final world states with ``truth``, an independent
    run without speculation (so the baseline row is checked too, never against itself); without
    one, against ``base``, and the baseline row says ``"ref"``. ``time_saved_ci95`` is a paired
    bootstrap over tasks (:mod:`..report._ci`)."""
    ref = reference if reference is not None else base
    is_ref = reference is not None and spec is reference
    saved, saved_ref, measured, predicted, alphas, gs = [], [], [], [], [], []
    for b, r, s in zip(base, ref, spec):
        g = _mean(s.draft_seconds)
        # Hits beyond the baseline's: a pure call repeated in a session is served from the cache
        # without any drafter, and that is no speculation's doing.
        alpha = max(0, s.hits - b.hits) / s.calls if s.calls else 0.0
        saved.append(100.0 * (b.wall_s - s.wall_s) / b.wall_s if b.wall_s else 0.0)
        saved_ref.append(100.0 * (r.wall_s - s.wall_s) / r.wall_s if r.wall_s else 0.0)
        measured.append(r.wall_s / s.wall_s if s.wall_s else 1.0)
        predicted.append(predicted_speedup(r, alpha, g))
        alphas.append(alpha)
        gs.append(g)
    if is_ref:
        measured = [b.wall_s / s.wall_s if s.wall_s else 1.0 for b, s in zip(base, spec)]
    turns = sum(s.steps for s in spec) or 1
    main_tokens = sum(s.completion_tokens for s in spec)
    drafter_tokens = sum(s.drafter_tokens for s in spec)
    cost = (main_tokens * prices.get("main", 0.0) + drafter_tokens * prices.get("drafter", 0.0)) / 1e6
    row = {
        **meta,
        "time_saved_pct": _mean(saved),
        "throughput_tok_s": _mean([s.completion_tokens / s.wall_s for s in spec if s.wall_s]),
        "baseline_throughput_tok_s": _mean([b.completion_tokens / b.wall_s for b in base if b.wall_s]),
        "hit_rate": _mean(alphas),
        "wasted_tool_runs": sum(s.tool_runs for s in spec) - sum(b.tool_runs for b in base),
        "predicted_speedup": None if is_ref else _mean(predicted),
        "measured_speedup": _mean(measured),
        "measured_over_predicted": None
        if is_ref
        else (_mean(measured) / _mean(predicted) if predicted else 1.0),
        "speedup_over": "baseline" if reference is None or is_ref else "eager",
        "time_saved_vs_eager_pct": None if reference is None or is_ref else _mean(saved_ref),
        "wall_reference_s": _mean([r.wall_s for r in ref]),
        "drafts": sum(s.drafts for s in spec),
        "undrafted_requests": sum(s.undrafted for s in spec),
        "samples_chosen": samples_chosen(spec),
        "G_mean_s": _mean([x for b in base for x in b.G]),
        "T_mean_s": _mean([x for b in base for x in b.T if x > 0]),
        "g_mean_s": _mean(gs),
        "wall_base_s": _mean([b.wall_s for b in base]),
        "wall_spec_s": _mean([s.wall_s for s in spec]),
        "steps": sum(s.steps for s in spec),
        "calls": sum(s.calls for s in spec),
        "extra_drafter_tokens": drafter_tokens,
        "cost_per_100_turns_usd": 100.0 * cost / turns,
        **_same_fields(base, spec, truth),
        "time_saved_ci95": _ci(base, spec),
        "tasks_n": len(per_task(spec)),  # distinct tasks (the CI's unit)
        "transcript_sha256": transcript_digest(spec),
        "engine_resolved_calls": sum(s.engine_resolved for s in spec),
    }
    if not is_ref and meta.get("config") != "baseline":
        row["model_curve"] = model_curve(base, ref, _mean(gs))
    if calibration is not None:
        row.update(_engine_fields(base, spec, calibration))
        if meta.get("config") in ("engine", "engine+eager"):
            row["predicted_client_speedup"] = row["predicted_speedup"]
            row["predicted_speedup"] = row["predicted_engine_speedup"]
            row["measured_over_predicted"] = row["measured_speedup"] / row["predicted_speedup"]
    return row


def _engine_fields(base: Sequence[AgentResult], spec: Sequence[AgentResult], cal: Any) -> dict[str, Any]:
    """Eq. 4/6 per agent with α_engine = calls the engine resolved in place / all calls."""
    alphas = [s.engine_resolved / s.calls if s.calls else 0.0 for s in spec]
    preds = [
        engine_prediction(b, a, cal.prefill_s_per_token, cal.decode_s_per_token) for b, a in zip(base, alphas)
    ]
    return {
        "engine_hit_rate": _mean(alphas),
        "predicted_engine_speedup": _mean([p["speedup"] for p in preds]),
        "eq4_base_s": _mean([p["eq4_s"] for p in preds]),
        "eq6_engine_s": _mean([p["eq6_s"] for p in preds]),
        "eq6_no_prefix_cache_s": _mean([p["eq6_no_o1_s"] for p in preds]),
        "request_overhead_s": _mean([p["overhead_s"] for p in preds]),
        "phi_s_per_token": cal.prefill_s_per_token,
        "delta_s_per_token": cal.decode_s_per_token,
    }


def _strip(ts: list[list[dict[str, Any]]]) -> list[Any]:
    """What the agent saw: roles, contents and calls (tool call ids are random per run)."""
    return [
        [(m.get("role"), m.get("content"), [c["function"] for c in m.get("tool_calls") or []]) for m in t]
        for t in ts
    ]


def _same(b: AgentResult, s: AgentResult) -> bool:
    """Speculation must not change what the agent saw (tool call ids aside) nor the world."""
    return _strip(b.transcript) == _strip(s.transcript) and b.world_states == s.world_states


def _same_fields(
    base: Sequence[AgentResult], spec: Sequence[AgentResult], truth: Sequence[AgentResult] | None
) -> dict[str, Any]:
    if truth is None and spec is base:  # nothing independent to compare the baseline with
        return {"same": "ref", "same_transcripts": "ref", "same_world_state": "ref", "same_against": None}
    ref = truth if truth is not None else base
    transcripts = all(_strip(r.transcript) == _strip(s.transcript) for r, s in zip(ref, spec))
    worlds = all(r.world_states == s.world_states for r, s in zip(ref, spec))
    return {
        "same": transcripts and worlds,
        "same_transcripts": transcripts,
        "same_world_state": worlds,
        "same_against": "independent run without speculation" if truth is not None else "baseline",
    }


def per_task(runs: Sequence[AgentResult]) -> dict[str, float]:
    """Wall seconds per distinct task (a task run more than once, by several agents or a
    wrapped assignment, is one unit of the bootstrap: its runs are summed)."""
    out: dict[str, float] = {}
    for r in runs:
        for task, wall in zip(r.task_ids, r.task_walls):
            out[task] = out.get(task, 0.0) + wall
    return out


def _ci(base: Sequence[AgentResult], spec: Sequence[AgentResult]) -> list[float] | None:
    """95 % CI of time saved over distinct tasks, each paired with its baseline run; None with
    fewer than two tasks (one task has no spread to resample)."""
    b, s = per_task(base), per_task(spec)
    if len(b) < 2 or b.keys() != s.keys():
        return None
    keys = sorted(b)
    lo, hi = bootstrap_saved_ci([b[k] for k in keys], [s[k] for k in keys])
    return [round(lo, 2), round(hi, 2)]


def pooled_saved_pct(base: Sequence[AgentResult], spec: Sequence[AgentResult]) -> float:
    """Time saved over all tasks pooled (the statistic the CI is for)."""
    b, s = per_task(base), per_task(spec)
    return saved_pct([b[k] for k in sorted(b)], [s.get(k, 0.0) for k in sorted(b)])


def transcript_digest(runs: Sequence[AgentResult]) -> str:
    """sha256 of every agent's transcript (ids aside): equal across rows iff the transcripts are."""
    text = json.dumps([_strip(r.transcript) for r in runs], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
