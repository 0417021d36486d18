"""Which backend serves the embedded main model: ``spectool bench --backend auto|torch|vllm``.

``auto`` decides from a measurement on this machine, never from a guess: the single-stream
decode rate of each backend at the bench's dtype (the main job runs one agent, so one stream's
speed is what it feels). The rates come from ``python -m spectool.bench._backends_main`` (the full
comparison records them) or, when none are recorded for this machine, model and dtype, from a
short probe that starts each backend once and times one 64-token generation; either way they
are kept in ``~/.cache/spectool/backends.json``. Without a vLLM environment ``auto`` is torch,
with the reason printed. Pure choice logic apart from the probe (I/O).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MARGIN", "choose", "machine_key", "record_rates", "recorded_rates", "resolve_backend"]

MARGIN = 1.05  # vLLM must be ≥ 5 % faster: a tie keeps the in-process engine (no second venv, no subprocess)
CACHE_NAME = "backends.json"
MODEL = "SmolLM2-135M-Instruct"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_key(dtype: str, model: str = MODEL) -> str:
    """Rates hold for one machine (host, CPU, core count), model and dtype."""
    machine = f"{platform.node()}|{_cpu_model()}|{os.cpu_count()}|{platform.machine()}"
    return f"{model}|{dtype}|{hashlib.sha1(machine.encode()).hexdigest()[:12]}"


def _cache_file() -> Path:
    from ..embedded import cache_dir

    return cache_dir() / CACHE_NAME


def recorded_rates(dtype: str, path: Path | None = None) -> dict[str, Any] | None:
    path = path or _cache_file()
    try:
        entry = json.loads(path.read_text()).get(machine_key(dtype))
    except (OSError, ValueError, AttributeError):
        return None
    if not entry or not all(
        isinstance(entry.get("rates", {}).get(b), (int, float)) for b in ("torch", "vllm")
    ):
        return None
    return entry


def record_rates(
    rates: dict[str, float], dtype: str, *, source: str, path: Path | None = None
) -> dict[str, Any]:
    path = path or _cache_file()
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    entry = {
        "rates": {k: round(v, 2) for k, v in rates.items()},
        "unit": "decode tok/s, 1 stream",
        "dtype": dtype,
        "source": source,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    data[machine_key(dtype)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return entry


def choose(rates: dict[str, float], margin: float = MARGIN) -> str:
    """The faster backend by single-stream decode rate; torch unless vLLM wins by ``margin``."""
    return "vllm" if rates["vllm"] > margin * rates["torch"] else "torch"


def probe(dtype: str, threads: int | None, say: Callable[[str], None], tokens: int = 64) -> dict[str, float]:
    """Start each backend once and time one ``tokens``-token generation (after a warm-up)."""
    import httpx

    from spectool_serving.vllm.workload import decode_rate

    from ._embedded_main import EmbeddedMain

    rates = {}
    for backend in ("torch", "vllm"):
        say(f"probe: starting {backend} ({dtype})…")
        with EmbeddedMain(backend=backend, dtype=dtype, threads=threads) as main:
            with httpx.Client(base_url=main.base_url.removesuffix("/v1"), timeout=600) as c:
                decode_rate(c, main.model_name, 1, 8)
                rates[backend] = decode_rate(c, main.model_name, 1, tokens)
        say(f"probe: {backend} decodes {rates[backend]:.1f} tok/s (1 stream, {tokens} tokens)")
    return rates


def resolve_backend(
    requested: str, dtype: str, threads: int | None, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """{"backend", "requested", "reason"[, "rates", "source"]}: what the main job runs on, and why."""
    if requested in ("torch", "vllm"):
        return {"backend": requested, "requested": requested, "reason": "asked for"}
    from spectool_serving.vllm.serve import vllm_env_missing

    missing = vllm_env_missing()
    if missing:
        out = {"backend": "torch", "requested": "auto", "reason": f"vLLM unavailable: {missing}"}
        say(f"backend: torch ({out['reason']})")
        return out
    entry = recorded_rates(dtype)
    if entry is None:
        say("backend: no recorded decode rates for this machine/model/dtype; probing both backends")
        entry = record_rates(probe(dtype, threads, say), dtype, source="spectool bench probe")
    rates = entry["rates"]
    picked = choose(rates)
    out = {
        "backend": picked,
        "requested": "auto",
        "rates": rates,
        "source": entry["source"],
        "measured_at": entry["measured_at"],
        "reason": f"faster single-stream decode at {dtype}: torch {rates['torch']:.1f} vs "
        f"vLLM {rates['vllm']:.1f} tok/s ({entry['source']}, {entry['measured_at']})",
    }
    say(f"backend: {picked} ({out['reason']})")
    return out
