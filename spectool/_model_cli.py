"""``spectool model``: the performance model as a calculator, and the Figure-3 reproduction.

    spectool model client --G 2 --g 0.3 --T 1.5 --alpha 0.8 [--json]
    spectool model engine --turns 4 --prompt 800 --reasoning 40 --call 25 --output 120 \\
        --tool-time 1.0 --overhead 0.05 --prefill 0.002 --decode 0.06 --alpha 0.8 [--json]
    spectool model figure --out figure3.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from . import model
from .errors import ConfigError, missing_extra


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", metavar="WHAT", required=True)
    c = sub.add_parser("client", help="client-side speedup (Eq. 1–3) and its bound (Lemma 1)")
    c.add_argument("--G", type=float, required=True, help="main model generation time per turn (s)")
    c.add_argument("--g", type=float, required=True, help="drafter time (s)")
    c.add_argument("--T", type=float, required=True, help="tool time per turn (s)")
    c.add_argument("--alpha", type=float, required=True, help="hit rate α in [0, 1]")
    c.add_argument("--turns", type=int, default=1, help="turns N (scales the times)")
    c.add_argument("--json", action="store_true", help="print JSON")
    e = sub.add_parser("engine", help="engine-side times (Eq. 4–6), same value every turn")
    for flag, typ, default, text in [
        ("--turns", int, 4, "turns K"),
        ("--prompt", int, 800, "prompt tokens X_1"),
        ("--reasoning", int, 0, "reasoning tokens per turn R_i"),
        ("--call", int, 25, "tool-call tokens per turn t_i"),
        ("--output", int, 100, "tool-output tokens per turn t_o,i"),
        ("--tool-time", float, 1.0, "tool time per turn T_i (s)"),
        ("--overhead", float, 0.05, "per-request overhead o (s)"),
        ("--prefill", float, 0.002, "prefill seconds per token φ"),
        ("--decode", float, 0.06, "decode seconds per token δ"),
        ("--alpha", float, 0.8, "hit rate α"),
    ]:
        e.add_argument(flag, type=typ, default=default, help=f"{text} (default {default})")
    e.add_argument("--json", action="store_true", help="print JSON")
    f = sub.add_parser("figure", help="write the Figure-3 reproduction (PNG)")
    f.add_argument("--out", type=Path, default=Path("figure3.png"))


def client_report(G: float, g: float, T: float, alpha: float, turns: int = 1) -> dict[str, Any]:
    std = model.client_time_standard(G, T, turns)
    spec = model.client_time_speculative(G, g, T, alpha, turns)
    return {
        "inputs": {"G": G, "g": g, "T": T, "alpha": alpha, "turns": turns},
        "time_standard_s": std,
        "time_speculative_s": spec,
        "speedup": std / spec,
        "time_saved_pct": 100.0 * (std - spec) / std,
        "max_speedup": model.max_speedup(G, g, T),
        "upper_bound": model.speedup_upper_bound(G, g, T),
    }


def engine_report(args: argparse.Namespace) -> dict[str, Any]:
    k = args.turns
    if k < 1:
        raise ConfigError("--turns must be ≥ 1")
    w = model.EngineWorkload(
        prompt_tokens=args.prompt,
        reasoning_tokens=[args.reasoning] * k,
        call_tokens=[args.call] * k,
        output_tokens=[args.output] * k,
        tool_times=[args.tool_time] * k,
        overhead=args.overhead,
        prefill_s_per_token=args.prefill,
        decode_s_per_token=args.decode,
    )
    e = model.engine_times(w, args.alpha)
    return {
        "inputs": {
            k_: v
            for k_, v in vars(args).items()
            if not k_.startswith("_") and k_ not in ("json", "model_command", "command")
        },
        "vanilla_s": e.vanilla,
        "cached_s": e.cached,
        "speculative_s": e.speculative,
        "speedup_over_vanilla": e.speedup_over_vanilla,
        "speedup_over_cached": e.speedup_over_cached,
        "parts": e.parts,
    }


def figure3(out: Path) -> Path:
    """Speedup over α, g/G and T/G (the paper's Figure 3), computed from :mod:`spectool.model`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("matplotlib", "bench") from exc
    grid = [i / 100 for i in range(101)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    for t in (0.25, 0.5, 1.0, 2.0):
        ax.plot(grid, [model.client_speedup(1.0, 0.1, t, a) for a in grid], label=f"T/G={t}")
    ax.set(xlabel="hit rate α", ylabel="speedup S", title="S over α (g/G = 0.1)")
    ax.legend()
    ax = axes[1]
    gs = [i / 100 for i in range(0, 100)]
    for a in (0.5, 0.8, 1.0):
        ax.plot(gs, [model.client_speedup(1.0, g, 1.0, a) for g in gs], label=f"α={a}")
    ax.plot(gs, [model.speedup_upper_bound(1.0, g, 1.0) for g in gs], "k--", label="2 − 2g/(G+g+T)")
    ax.set(xlabel="drafter time g/G", ylabel="speedup S", title="S over g/G (T = G)")
    ax.legend()
    ax = axes[2]
    ts = [i / 20 for i in range(1, 121)]
    for a in (0.5, 0.8, 1.0):
        ax.plot(ts, [model.client_speedup(1.0, 0.1, t, a) for t in ts], label=f"α={a}")
    ax.plot(ts, [model.speedup_upper_bound(1.0, 0.1, t) for t in ts], "k--", label="bound")
    ax.axvline(0.9, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="tool time T/G", ylabel="speedup S", title="S over T/G (g/G = 0.1; best at T = G − g)")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _print_human(report: dict[str, Any]) -> None:
    for key, value in report.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:<22} {v:.4g}" if isinstance(v, float) else f"  {k:<22} {v}")
        else:
            print(f"{key:<24} {value:.4g}" if isinstance(value, float) else f"{key:<24} {value}")


def run(args: argparse.Namespace) -> int:
    if args.model_command == "figure":
        print(figure3(args.out))
        return 0
    if args.model_command == "client":
        report = client_report(args.G, args.g, args.T, args.alpha, args.turns)
    else:
        report = engine_report(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_human(report)
    return 0
