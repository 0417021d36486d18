"""``spectool drafters eval``: evaluate drafters offline on BFCL or τ² ground truth.

    spectool drafters eval --categories simple_python,multi_turn_base --split test \\
        --drafters history --samples 1,3 --limit 40 --out drafter-eval
    spectool drafters eval --workload tau2 --domains airline,retail --split test \\
        --drafters history,mined,tuned --samples 1,3
    spectool drafters eval --categories multiple --drafters \\
        local:qwen2.5-coder-0.5b,prompt=native,diversity=beam,min_confidence=0.3

``eval`` prints a table and writes ``results.json`` (one row per drafter × category × split × λ;
a row names its drafter by the whole spec, see :mod:`._specs`)
and ``drafter_eval.png`` into ``--out``. The core's ``spectool drafters`` command finds this
subcommand through the ``spectool.drafters.commands`` entry-point group (bench/pyproject.toml);
``spectool drafters tune`` is the core's own (:mod:`spectool.drafters.tune`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spectool.errors import ConfigError

from ._specs import DRAFTERS, factories


def _words(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in _words(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def add_arguments(ev: argparse.ArgumentParser) -> None:
    ev.add_argument(
        "--categories",
        type=_words,
        default=("simple_python", "multi_turn_base"),
        help="BFCL categories, comma-separated, or 'all' (default simple_python,multi_turn_base)",
    )
    ev.add_argument(
        "--workload",
        choices=("bfcl", "tau2"),
        default="bfcl",
        help="bfcl (--categories) or tau2 (--domains: τ²-bench's gold actions on its real tools)",
    )
    ev.add_argument(
        "--domains",
        type=_words,
        help="τ² domains, comma-separated (--workload tau2; default: every domain in the wheel)",
    )
    ev.add_argument(
        "--split",
        choices=("train", "dev", "test", "all"),
        default="test",
        help="BFCL: tasks by content (spectool_bench.bfcl._splits), train, dev or test; τ²: its own "
        "split_tasks.json (train / test) (default test)",
    )
    ev.add_argument(
        "--drafters",
        type=_words,
        default=("history",),
        help=f"comma-separated specs NAME[:MODEL][,key=value…] with NAME one of {', '.join(DRAFTERS)}; "
        "key=value words are LocalDrafterOptions of the model drafter before them, e.g. "
        "local:qwen2.5-coder-0.5b,prompt=native,diversity=beam,min_confidence=0.3 (default history)",
    )
    ev.add_argument("--samples", type=_ints, default=(1, 3), help="λ values (default 1,3)")
    ev.add_argument("--limit", type=int, help="first N tasks of the split per category")
    ev.add_argument(
        "--second-half",
        action="store_true",
        help="draft for every task in order, score only the second half (a learning drafter "
        "has then learnt from the first)",
    )
    ev.add_argument(
        "--adapter",
        type=Path,
        help="the tuned drafters' adapter folder (default: the shipped one), e.g. one of yours "
        "from `spectool drafters tune`",
    )
    ev.add_argument(
        "--model",
        help="base model of the local and tuned drafters: embedded (default), a .gguf file or an "
        "HF folder; an adapter must have been tuned on it",
    )
    ev.add_argument("--out", type=Path, default=Path("drafter-eval"), help="output folder")
    ev.add_argument("--threads", type=int, help="torch CPU threads for model drafters")
    ev.add_argument("--no-progress", action="store_true")
    ev.add_argument("--no-plot", action="store_true")


def _check_drafters(
    words: tuple[str, ...], adapter: Path | None = None, model: str | None = None
) -> dict[str, Callable[[str], Any]]:
    """Label -> factory for each ``--drafters`` spec (:mod:`._specs`), each built once here."""
    chosen = factories(words, adapter, model)
    for build in chosen.values():  # fail before hours of work if a drafter cannot even be built
        build("")
    return chosen


def _categories(
    names: tuple[str, ...], workload: str = "bfcl", domains: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    from ..bfcl._tasks import ALL_CATEGORIES

    if workload == "tau2":
        from ..tau2._tasks import PREFIX, all_categories

        chosen = tuple(PREFIX + d for d in domains) if domains else all_categories()
        unknown = [c for c in chosen if c not in all_categories()]
        if unknown:
            known = ", ".join(c[len(PREFIX) :] for c in all_categories())
            raise ConfigError(f"unknown τ² domain(s) {[c[len(PREFIX) :] for c in unknown]}; known: {known}")
        return chosen
    if domains:
        raise ConfigError("--domains is for --workload tau2")
    if names == ("all",):
        return ALL_CATEGORIES
    unknown = [c for c in names if c not in ALL_CATEGORIES]
    if unknown or not names:
        raise ConfigError(f"unknown BFCL categor(y/ies) {unknown}; known: {', '.join(ALL_CATEGORIES)}")
    return names


def run(args: argparse.Namespace) -> int:
    import anyio

    from ._eval import check_samples, run_grid
    from ._report import drafter_table, miss_table, write_drafter_plot, write_drafter_results

    check_samples(args.samples)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be ≥ 1, got {args.limit}")
    categories = _categories(
        args.categories, getattr(args, "workload", "bfcl"), getattr(args, "domains", None)
    )
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    drafters = _check_drafters(args.drafters, args.adapter, args.model)
    t0 = time.perf_counter()
    rows = anyio.run(
        run_grid,
        drafters,
        categories,
        args.split,
        args.samples,
        args.limit,
        not args.no_progress,
        getattr(args, "second_half", False),
    )
    print(drafter_table(rows))
    print("\nWhy speculable calls were missed (kinds add up to the missed calls):")
    print(miss_table(rows))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    meta = {
        "command": "spectool drafters eval",
        "workload": getattr(args, "workload", "bfcl"),
        "split": args.split,
        "limit": args.limit,
        "second_half": getattr(args, "second_half", False),
        "adapter": str(args.adapter) if args.adapter else "shipped",
        "model": args.model or "embedded",
        "wall_s": round(time.perf_counter() - t0, 1),
        "load_average": load,
        "note": "offline: no main model, no injected latency; g is wall time per propose()",
    }
    print(f"wrote {write_drafter_results(rows, meta, args.out)}")
    if not args.no_plot:
        print(f"wrote {write_drafter_plot(rows, args.out)}")
    return 0
