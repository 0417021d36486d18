"""Measured forward costs f(B, c, n) for CAST, stored per (device, model, dtype) and reused.

The ``cast`` and ``both`` decoding policies shape trees by what a forward of n tokens costs
on this machine; the table is measured once through the engine's own runner and KV
(:func:`.cast.measure_cost_table`) and kept in the spectool cache.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from spectool.settings import settings

__all__ = ["COST_WIDTHS", "MODEL_NAME", "calibration_dir", "cost_table", "device_name"]


def device_name() -> str:
    try:
        import torch
    except ImportError:
        return f"cpu-{platform.machine()}"
    if torch.cuda.is_available():
        return "cuda-" + torch.cuda.get_device_name(0).replace(" ", "_")
    from ..backends.kernels import available

    # the kernels set the cost curve: tables measured on one never stand for the other
    # ("-fused": the panel GEMM with every Llama layer's glue in C, :mod:`spectool_serving.backends.fused`)
    return f"cpu-{platform.machine()}" + ("-fused" if available() else "")


def calibration_dir() -> Path:
    """Where cost tables live: ``$SPECTOOL_TREE_CALIBRATION`` or the spectool cache."""

    from spectool.embedded import cache_dir

    override = settings().tree_calibration
    return override if override else cache_dir() / "tree-calibration"


MODEL_NAME = "SmolLM2-135M-Instruct"
# dense at small widths, where CPU GEMM kernels switch (fp32 here: 3 rows cost about 1, 4 cost 1.5)
COST_WIDTHS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64]


def cost_table(
    model: Any, dtype: str, batches: list[int], refresh: bool = False, name: str = MODEL_NAME
) -> Any:
    """Measured f(B, c, n) (a :class:`.cast.CostTable`), cached per (device, model, dtype) in
    the spectool cache dir. The engine's CAST policy and decode-bench both read it."""
    from .cast import CostTable, measure_cost_table

    safe = name.replace("/", "_")
    path = calibration_dir() / f"costs-v6-{device_name()}-{safe}-{dtype}.json"
    if path.exists() and not refresh:
        table = CostTable.from_json(path.read_text())
        if set(batches) <= set(table.batches) and table.ns == COST_WIDTHS:
            return table
    table = measure_cost_table(model, batches, [256, 768], COST_WIDTHS, reps=7)
    table.save(path)
    return table
