"""Device-aware draft size g*: fit forward time s(g) and acceptance τ(g), maximise τ/s.

s(g) is fitted with a degree-2 B-spline (8 knots) + linear regression, τ(g) with a cubic
polynomial; g* = argmax τ(g)/s(g) by differential evolution (seed 42). When the fits are
degenerate (too few points, non-positive or non-finite predictions) the measured grid's best
ratio is used instead. Results are stored per (device, model, dtype, batch) and reused.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spectool.settings import settings

__all__ = [
    "Calibration",
    "calibration_dir",
    "calibration_path",
    "fit_g_star",
    "load_calibration",
    "measure_tau",
    "pooled_tau",
    "save_calibration",
]


@dataclass
class Calibration:
    device: str
    model: str
    dtype: str
    batch: int
    gs: list[int]
    s: list[float]  # seconds per forward of g tokens
    tau: list[float]  # mean tokens emitted per step when verifying the top-g nodes
    g_star: int
    method: str  # "fit" | "grid"
    created: float = 0.0


FIT_TOLERANCE = 0.97  # the fitted g* may score at most 3 % below the best measured point


def fit_g_star(
    gs: list[int], s: list[float], tau: list[float], tolerance: float = FIT_TOLERANCE
) -> tuple[int, str]:
    """g* maximising fitted τ(g)/s(g) over [min(gs), max(gs)]; grid fallback when degenerate
    or when the measurements (interpolated) put the fitted g* well below the best grid point."""
    g = np.asarray(gs, dtype=np.float64)
    s_arr, t_arr = np.asarray(s, dtype=np.float64), np.asarray(tau, dtype=np.float64)
    grid_best = int(g[np.argmax(t_arr / s_arr)])
    if len(np.unique(g)) < 6 or not (np.all(np.isfinite(s_arr)) and np.all(s_arr > 0)):
        return grid_best, "grid"
    from scipy.optimize import differential_evolution
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import SplineTransformer

    # quantile knots: the g grid is denser at small g; uniform knots leave empty intervals
    s_fit = make_pipeline(SplineTransformer(degree=2, n_knots=8, knots="quantile"), LinearRegression())
    s_fit.fit(g[:, None], s_arr)
    coef = np.polyfit(g, t_arr, 3)

    def ratio(x: np.ndarray | float) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        return np.polyval(coef, x) / s_fit.predict(x[:, None])

    dense = np.linspace(g.min(), g.max(), 200)
    pred_s = s_fit.predict(dense[:, None])
    if not np.all(np.isfinite(pred_s)) or np.any(pred_s <= 0) or not np.all(np.isfinite(ratio(dense))):
        return grid_best, "grid"
    best = differential_evolution(
        lambda x: -float(ratio(x[0])[0]), [(float(g.min()), float(g.max()))], seed=42, tol=1e-8
    )
    x = float(best.x[0])
    cands = [c for c in {int(np.floor(x)), int(np.ceil(x))} if g.min() <= c <= g.max()]
    g_fit = max(cands, key=lambda c: float(ratio(c)[0]))
    # a cubic can bulge where τ saturates: keep the fit only where the data agree with it
    measured = np.interp(g_fit, g, t_arr) / np.interp(g_fit, g, s_arr)
    if measured < tolerance * float(np.max(t_arr / s_arr)):
        return grid_best, "grid"
    return g_fit, "fit"


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
    """Where cost tables and g* live: ``$SPECTOOL_TREE_CALIBRATION`` or the spectool cache."""

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


# bumped whenever what g* is measured on changes (v2: the lean Llama forward; v3: held-out
# prompts of every category; v5: the serving path, runner + batched KV), so a stored g* from
# an older recipe is not reused
CALIBRATION_VERSION = "v5"


def calibration_path(device: str, model: str, dtype: str, batch: int) -> Path:
    safe = "-".join(x.replace("/", "_") for x in (device, model, dtype, f"b{batch}"))
    return calibration_dir() / f"g-star-{CALIBRATION_VERSION}-{safe}.json"


def save_calibration(cal: Calibration) -> Path:
    path = calibration_path(cal.device, cal.model, cal.dtype, cal.batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cal), indent=1))
    return path


def load_calibration(device: str, model: str, dtype: str, batch: int) -> Calibration | None:
    path = calibration_path(device, model, dtype, batch)
    if not path.exists():
        return None
    try:
        return Calibration(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None  # a stale or foreign file: recalibrate


def truncated_path_len(tree: Any, path: list[int], g: int) -> int:
    """Tokens emitted had only the top-g nodes (by confidence) been verified (greedy)."""
    top = set(tree.best_first()[:g])
    n = 0
    while n < len(path) and path[n] in top:
        n += 1
    return n  # accepted drafts (n - 1) + the bonus token


def measure_tau(
    model: Any,
    prompts: list[list[int]],
    gs: list[int],
    max_new_tokens: int,
    eos: int | set[int] | None = None,
) -> list[float]:
    """τ(g) for every g in one greedy run per prompt at g = max(gs): greedy decoding follows
    the same trajectory whatever the tree, so each step's accepted path can be cut to any
    top-g. Per prompt the mean over its steps, then the geometric mean over prompts: the
    speedup of each request counts alike, rather than fresh-text prompts (many short steps)
    outvoting copy-heavy ones (few long steps)."""
    from .decode import decode

    per_prompt: list[list[float]] = []
    for p in prompts:
        lens: dict[int, list[int]] = {g: [] for g in gs}

        def on_step(tree: Any, path: list[int], lens: dict[int, list[int]] = lens) -> None:
            for g in gs:
                lens[g].append(truncated_path_len(tree, path, g))

        # every step drafted: τ(g) must see each step, not only those a draft gate lets through
        decode(model, [p], max_new_tokens, "unispec", g=max(gs), eos=eos, on_step=on_step, gate=False)
        per_prompt.append([float(np.mean(lens[g])) for g in gs])
    return pooled_tau(per_prompt)


def pooled_tau(per_prompt: list[list[float]]) -> list[float]:
    """Geometric mean over prompts of each prompt's τ(g): [P, len(gs)] -> [len(gs)]."""
    return np.exp(np.log(np.asarray(per_prompt, dtype=np.float64)).mean(axis=0)).tolist()


def calibrate(
    model: Any,
    model_name: str,
    prompts: list[list[int]],
    *,
    batch: int = 1,
    gs: list[int] | None = None,
    max_new_tokens: int = 48,
    ctx: int = 256,
    eos: int | set[int] | None = None,
    table: Any = None,
) -> Calibration:
    """Measure s(g) (cost table at ``ctx``) and τ(g), fit, and store the result."""
    from .cast import measure_cost_table

    gs = gs or [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    if table is None:
        table = measure_cost_table(model, [batch], [ctx], gs)
    curve = table.curve(batch, ctx)
    s = [float(curve[g - 1]) for g in gs]
    tau = measure_tau(model, prompts, gs, max_new_tokens, eos)
    g_star, method = fit_g_star(gs, s, tau)
    dtype = str(model.dtype).removeprefix("torch.")
    cal = Calibration(device_name(), model_name, dtype, batch, gs, s, tau, g_star, method, time.time())
    save_calibration(cal)
    return cal
