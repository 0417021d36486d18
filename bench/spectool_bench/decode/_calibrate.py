"""Device-aware draft size g*: fit forward time s(g) and acceptance τ(g), maximise τ/s.

s(g) is fitted with a degree-2 B-spline (8 knots) + linear regression, τ(g) with a cubic
polynomial; g* = argmax τ(g)/s(g) by differential evolution (seed 42). When the fits are
degenerate (too few points, non-positive or non-finite predictions) the measured grid's best
ratio is used instead. Results are stored per (device, model, dtype, batch) and reused.

τ(g) is measured through the serving engine (:mod:`._loop`): one greedy run per prompt with
a ``unispec`` policy at g = max(gs) and no gate, each verified tree cut to every top-g.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from spectool_serving.tree.calibrate import calibration_dir, device_name
from spectool_serving.tree.policy import DecodingPolicy

from ._loop import bench_engine, run_engine

__all__ = [
    "Calibration",
    "calibrate",
    "fit_g_star",
    "load_calibration",
    "measure_tau",
    "pooled_tau",
    "truncated_path_len",
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


# bumped whenever what g* is measured on changes (v2: the lean Llama forward; v3: held-out
# prompts of every category; v5: the serving path, runner + batched KV; v6: the engine's own
# loop and policy), so a stored g* from an older recipe is not reused
CALIBRATION_VERSION = "v6"


def _path(device: str, model: str, dtype: str, batch: int) -> Any:
    safe = "-".join(x.replace("/", "_") for x in (device, model, dtype, f"b{batch}"))
    return calibration_dir() / f"g-star-{CALIBRATION_VERSION}-{safe}.json"


def load_calibration(device: str, model: str, dtype: str, batch: int) -> Calibration | None:
    path = _path(device, model, dtype, batch)
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


def _recording(vocab: int, gs: list[int]) -> tuple[DecodingPolicy, dict[int, list[int]]]:
    """A ``unispec`` policy at g = max(gs), every step drafted, that also records per verified
    step the tokens each top-g cut of its tree would have emitted (greedy decoding follows one
    trajectory whatever the tree). The recording wraps this instance's own methods."""
    policy = DecodingPolicy("unispec", vocab, g=max(gs), gate=False)
    lens: dict[int, list[int]] = {g: [] for g in gs}
    observe_tree, observe = policy.observe_tree, policy.observe

    def on_tree(prev: int, tree: Any, logits: Any, path: list[int], verify_s: float = 0.0) -> None:
        for g in gs:
            lens[g].append(truncated_path_len(tree, path, g))
        observe_tree(prev, tree, logits, path, verify_s)

    def on_chain(prev: int, fed: list[int], logits: Any, n_accepted: int, verify_s: float = 0.0) -> None:
        for g in gs:  # a step with no tree (an empty store): what a chain of g - 1 would emit
            lens[g].append(1 + min(n_accepted, g - 1))
        observe(prev, fed, logits, n_accepted, verify_s)

    policy.observe_tree, policy.observe = on_tree, on_chain  # type: ignore[method-assign]
    return policy, lens


def measure_tau(
    model: Any, tokenizer: Any, fmt: Any, prompts: list[list[int]], gs: list[int], max_new_tokens: int
) -> list[float]:
    """τ(g) for every g, one greedy engine run per prompt at g = max(gs). Per prompt the mean
    over its steps, then the geometric mean over prompts: the speedup of each request counts
    alike, rather than fresh-text prompts (many short steps) outvoting copy-heavy ones."""
    per_prompt: list[list[float]] = []
    engine = bench_engine(model, tokenizer, fmt)
    for p in prompts:
        policy, lens = _recording(model.config.vocab_size, gs)
        run_engine(engine, [p], max_new_tokens, policy)
        per_prompt.append([float(np.mean(lens[g])) for g in gs])
    return pooled_tau(per_prompt)


def pooled_tau(per_prompt: list[list[float]]) -> list[float]:
    """Geometric mean over prompts of each prompt's τ(g): [P, len(gs)] -> [len(gs)]."""
    return np.exp(np.log(np.asarray(per_prompt, dtype=np.float64)).mean(axis=0)).tolist()


def calibrate(
    model: Any,
    tokenizer: Any,
    fmt: Any,
    model_name: str,
    prompts: list[list[int]],
    table: Any,
    *,
    batch: int = 1,
    gs: list[int] | None = None,
    max_new_tokens: int = 48,
    ctx: int = 256,
) -> Calibration:
    """s(g) from the cost ``table`` at ``ctx``, τ(g) measured, fit, and store the result."""
    gs = gs or [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    curve = table.curve(batch, ctx)
    s = [float(curve[g - 1]) for g in gs]
    tau = measure_tau(model, tokenizer, fmt, prompts, gs, max_new_tokens)
    g_star, method = fit_g_star(gs, s, tau)
    dtype = str(model.dtype).removeprefix("torch.")
    cal = Calibration(device_name(), model_name, dtype, batch, gs, s, tau, g_star, method, time.time())
    path = _path(cal.device, cal.model, cal.dtype, cal.batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cal), indent=1))
    return cal
