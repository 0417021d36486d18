"""``spectool bench``: BFCL multi-agent benchmark of speculative tool calling.

    spectool bench --quick --out bench-out          # the main job: a few minutes on 2 cores
                                                    # (replay headline on the test split, then
                                                    # the embedded engine end to end)
    spectool bench --long --out bench-long          # 64 BFCL + every airline/retail τ² test
                                                    # task, 5 arms each (≈ 40 min on 2 cores)
    spectool bench --full --out bench-full          # the paper's grid (hours)
    spectool bench --validate --out bench-validate  # oracle drafter, T ≈ G, α ∈ {0.5, 0.8, 1.0}

Prints a summary table and writes ``results.json`` and three PNG plots into ``--out``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from spectool.errors import ConfigError


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _floats(text))


def _words(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _lambdas(text: str) -> tuple[int | str, ...]:
    """λ values: integers ≥ 1 or ``auto``."""
    out: list[int | str] = []
    for word in _words(text):
        if word == "auto":
            out.append(word)
            continue
        try:
            out.append(int(word))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"λ must be an integer or 'auto', got {word!r}") from exc
    return tuple(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="short experiment (default)")
    preset.add_argument(
        "--long",
        action="store_true",
        help="the long run beside the main job: 64 BFCL and every airline + retail τ² test task, "
        "one drafter per arm, 95%% CIs (≈ 40 min on 2 cores); --workload bfcl|tau2 runs one half",
    )
    preset.add_argument("--full", action="store_true", help="the paper's full sweep")
    preset.add_argument(
        "--validate",
        action="store_true",
        help="model validation: oracle drafter, T ≈ G, α ∈ {0.5, 0.8, 1.0}, single-turn tasks",
    )
    p.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder")
    p.add_argument(
        "--workload",
        choices=("bfcl", "tau2"),
        help="tau2: τ²-bench domains (--domains) on the replay main model, τ²'s own split",
    )
    p.add_argument("--domains", type=_words, help="τ² domains, comma-separated (default: all in the wheel)")
    p.add_argument("--categories", type=_words, help="BFCL categories, comma-separated")
    p.add_argument("--agents", type=_ints, help="concurrent agents M, e.g. 1,8,32")
    p.add_argument("--tasks-per-agent", type=int)
    p.add_argument("--latencies", type=_floats, help="mean tool latencies (s), e.g. 0,0.1,0.5")
    p.add_argument("--latency-cv", type=float, help="tool latency sd / mean (default 0.2)")
    p.add_argument("--samples", type=_lambdas, help="λ values, e.g. 1,3,auto (auto: chosen per request)")
    p.add_argument("--split", choices=("train", "dev", "test", "all"), help="BFCL task split (by content)")
    p.add_argument("--tasks-per-category", type=int, help="first N tasks of each category (after --split)")
    p.add_argument(
        "--eager-arm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run eager dispatch alone as an arm, and drafter arms with eager dispatch on",
    )
    p.add_argument("--configs", type=_words, help="client and/or engine")
    p.add_argument("--drafters", type=_words, help="oracle, history, mined, learning, local, tuned, endpoint")
    p.add_argument("--alphas", type=_floats, help="oracle hit probabilities")
    p.add_argument("--oracle-delay", type=float, help="oracle delay g (s)")
    p.add_argument("--repeats", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--main",
        choices=("embedded", "replay", "endpoint"),
        help="main model: embedded (the serving engine on SmolLM2; default of --quick/--full), "
        "replay (BFCL ground truth with a token-rate clock; default of --validate), endpoint",
    )
    p.add_argument("--base-url", help="OpenAI-compatible main model endpoint (--main endpoint)")
    p.add_argument("--model", help="main model name")
    p.add_argument("--drafter-base-url")
    p.add_argument("--drafter-model")
    p.add_argument("--prefill-rate", type=float, help="replay model prefill tok/s")
    p.add_argument("--decode-rate", type=float, help="replay model decode tok/s")
    p.add_argument("--reasoning-tokens", type=int, help="replay model reasoning tokens per step")
    p.add_argument("--overhead", type=float, help="replay model per-request overhead (s)")
    p.add_argument("--task-ids", type=_words, help="BFCL task ids to run, e.g. multi_turn_base_3")
    p.add_argument("--max-turns", type=int, help="user turns per task")
    p.add_argument("--max-steps", type=int, help="model messages per user turn")
    p.add_argument("--max-tokens", type=int, help="max_tokens per model message (real models)")
    p.add_argument("--tool-choice", choices=("auto", "required"), help="tool_choice sent to real models")
    p.add_argument(
        "--threads", type=int, help="torch CPU threads of the embedded engine (1 on a busy, shared CPU)"
    )
    p.add_argument(
        "--backend",
        choices=("auto", "torch", "vllm"),
        default="auto",
        help="embedded main model on the torch engine or vLLM; auto: the faster here, as measured "
        "(recorded rates or a short probe; torch when .venv-vllm is missing)",
    )
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16"), help="embedded main model dtype (default float32)"
    )
    p.add_argument("--price-main", type=float, help="USD per 1M main-model tokens")
    p.add_argument("--price-drafter", type=float, help="USD per 1M drafter tokens")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-plots", action="store_true")


def validate_plan():
    from ._replay import TokenRates
    from ._sweep import Plan

    # One call per task, stub tools (pure: every call speculable), so the measured α tracks the
    # oracle's. G ≈ 1.0 s per call step from the token-rate model; T̄ = 1.0 s ≈ G.
    return Plan(
        categories=("simple_python",),
        tasks_per_agent=6,
        agents=(4,),
        latencies=(1.0,),
        latency_cv=0.1,
        samples=(1,),
        drafters=("oracle",),
        oracle_alphas=(0.5, 0.8, 1.0),
        oracle_delay=0.05,
        rates=TokenRates(prefill_tok_s=2000.0, decode_tok_s=20.0, overhead_s=0.2),
    )


def build_plans(args: argparse.Namespace) -> list:
    """--quick without --main or --workload: the BFCL replay headline, the τ² section, then the
    embedded engine end to end (the options shape the first two). Otherwise one plan."""
    from ._plans import long_plans
    from ._sweep import quick_plan, tau2_plan

    if getattr(args, "long", False):
        if args.main not in (None, "replay"):
            raise ConfigError("--long runs on the replay main model (BFCL ground truth, τ²'s gold actions)")
        bfcl, tau2 = long_plans()
        if getattr(args, "domains", None):
            tau2 = replace(tau2, categories=_tau2_categories(args))
        # --categories names BFCL's half, --domains τ²'s
        halves = [
            build_plan(args, bfcl),
            build_plan(argparse.Namespace(**{**vars(args), "categories": None}), tau2),
        ]
        return {"bfcl": halves[:1], "tau2": halves[1:]}.get(getattr(args, "workload", None) or "", halves)
    if args.full or args.validate or args.main is not None or getattr(args, "workload", None):
        return [build_plan(args)]
    return [build_plan(args), build_plan(args, tau2_plan()), quick_plan()]


def _tau2_categories(args: argparse.Namespace) -> tuple[str, ...]:
    from ..tau2._tasks import PREFIX, all_categories

    if not getattr(args, "domains", None):
        return all_categories()
    return tuple(PREFIX + d for d in args.domains)


def build_plan(args: argparse.Namespace, base=None):
    from ._sweep import full_plan, headline_plan, quick_plan, tau2_plan

    if base is not None:
        plan = base
    elif args.full:
        plan = full_plan()
    elif args.validate:
        plan = validate_plan()
    elif getattr(args, "workload", None) == "tau2":
        if args.main not in (None, "replay"):
            raise ConfigError("--workload tau2 runs on the replay main model (its gold actions)")
        plan = replace(tau2_plan(), categories=_tau2_categories(args))
    else:  # --quick: the replay headline; --main embedded: the engine end to end
        plan = quick_plan() if args.main in ("embedded", "endpoint") else headline_plan()
    simple = {
        "categories": "categories",
        "agents": "agents",
        "tasks_per_agent": "tasks_per_agent",
        "latencies": "latencies",
        "latency_cv": "latency_cv",
        "samples": "samples",
        "configs": "configs",
        "drafters": "drafters",
        "alphas": "oracle_alphas",
        "oracle_delay": "oracle_delay",
        "repeats": "repeats",
        "seed": "seed",
        "main": "main",
        "base_url": "base_url",
        "model": "model",
        "drafter_base_url": "drafter_base_url",
        "drafter_model": "drafter_model",
        "task_ids": "task_ids",
        "max_turns": "max_turns",
        "max_steps": "max_steps_per_turn",
        "max_tokens": "max_tokens",
        "tool_choice": "tool_choice",
        "threads": "threads",
        "dtype": "dtype",
        "split": "split",
        "tasks_per_category": "tasks_per_category",
        "eager_arm": "eager_arm",
    }
    changes = {field: getattr(args, a) for a, field in simple.items() if getattr(args, a, None) is not None}
    if args.latencies is not None:
        changes["latency_matches_G"] = False
    plan = replace(plan, **changes)
    rate_args = {
        "prefill_tok_s": args.prefill_rate,
        "decode_tok_s": args.decode_rate,
        "reasoning_tokens": args.reasoning_tokens,
        "overhead_s": args.overhead,
    }
    plan = replace(plan, rates=replace(plan.rates, **{k: v for k, v in rate_args.items() if v is not None}))
    if args.price_main is not None:
        plan.prices["main"] = args.price_main
    if args.price_drafter is not None:
        plan.prices["drafter"] = args.price_drafter
    bad = set(plan.configs) - {"client", "engine"}
    if bad:
        raise ConfigError(f"unknown config(s) {sorted(bad)}: use client and/or engine (baseline always runs)")
    if "engine" in plan.configs and plan.main == "replay":
        raise ConfigError(
            "the engine-side config needs a serving engine as main model (--main embedded, or "
            "--main endpoint --base-url …); the replay model has no tool cache"
        )
    if plan.main == "endpoint" and not plan.base_url:
        raise ConfigError("--main endpoint needs --base-url")
    if plan.main == "replay" and plan.model == "smollm2":
        plan = replace(plan, model="replay")
    return plan


def run(args: argparse.Namespace) -> int:
    import time

    from ..report._results import write_plots, write_results
    from ..report._section import section_text

    t0 = time.perf_counter()
    sections = [_run_one(plan, args) for plan in build_plans(args)]
    timelines = [section.pop("timelines", None) for section in sections]  # pictures, not JSON
    results = dict(sections[0])
    for section in sections[1:]:
        results[section["plan"]["section"]] = section
    results["wall_s"] = time.perf_counter() - t0
    results["section_wall_s"] = {s["plan"]["section"]: s.pop("section_wall_s") for s in sections}
    for section in sections:
        print(section_text(section))
    parts = ", ".join(f"{name} {wall:.0f} s" for name, wall in results["section_wall_s"].items())
    job = "long run" if getattr(args, "long", False) else "main job"
    print(f"{job} wall time: {results['wall_s']:.0f} s ({parts})")
    path = write_results(results, args.out)
    print(f"wrote {path} ({results['wall_s']:.0f} s in all)")
    if not args.no_plots:
        for png in write_plots(sections[0]["runs"], args.out, sections[0].get("title", "")):
            print(f"wrote {png}")
        if timelines[0] is not None:
            from ..report._timeline import draw_timeline

            t = timelines[0]
            png = draw_timeline(
                t["plain"],
                t["fast"],
                args.out / "turn_timeline.png",
                title=f"{t['task']}: sequential vs {t['drafter']}",
            )
            print(f"wrote {png}")
        for section in sections[1:]:
            name = section["plan"]["section"]
            for png in write_plots(section["runs"], args.out / name, f"({name})"):
                print(f"wrote {png}")
    return 0


def _run_one(plan, args: argparse.Namespace) -> dict:
    import time

    from ._sweep import run_plan

    choice = None
    if plan.main == "embedded":
        from ..backends._choice import resolve_backend

        choice = resolve_backend(getattr(args, "backend", "auto"), plan.dtype, plan.threads)
        plan = replace(plan, backend=choice["backend"])
    t0 = time.perf_counter()
    results = run_plan(plan, progress=not args.no_progress)
    # per section, so a main job over its time budget says where the time went
    results["section_wall_s"] = time.perf_counter() - t0
    if choice is not None:
        results["backend"] = choice
    return results
