"""Tuned drafter adapters: load a peft LoRA adapter into the drafter model, find the shipped one.

The adapter is merged into the base weights after loading: an unmerged LoRA adds two small
matmuls per layer and token (drafting took ≈ 3.2 s unmerged vs well under a second merged on
this CPU). peft and torch load lazily.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..._quiet import quiet_peft_wrap
from ...errors import ConfigError

__all__ = ["SHIPPED_ADAPTER", "adapter_manifest", "load_adapter", "shipped_adapter_path"]

#: Folder name of the adapter shipped in the package (spectool/drafters/data/).
SHIPPED_ADAPTER = "adapter-smollm2-bfcl"


def shipped_adapter_path() -> Path:
    """The adapter shipped with spectool: SmolLM2-135M tuned on the BFCL train split."""
    path = Path(__file__).parents[1] / "data" / SHIPPED_ADAPTER
    if not (path / "adapter_config.json").is_file():
        raise ConfigError(f"the shipped drafter adapter is missing from {path} (a broken install?)")
    return path


def adapter_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``manifest.json`` written by ``spectool drafters tune`` ({} if there is none)."""
    file = Path(path) / "manifest.json"
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"unreadable adapter manifest {file}: {exc}") from exc


def load_adapter(model: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """``model`` with the LoRA adapter at ``path`` (None: the shipped one) folded into its
    weights (modified in place): the plain model comes back, as fast as the base."""
    folder = Path(path) if path is not None else shipped_adapter_path()
    if not (folder / "adapter_config.json").is_file():
        raise ConfigError(f"{folder} is not a peft adapter folder (no adapter_config.json)")
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ConfigError("loading a drafter adapter needs peft: pip install 'spectool[tune]'") from exc
    try:
        with quiet_peft_wrap():
            tuned = PeftModel.from_pretrained(model, str(folder))
    except (ValueError, RuntimeError, KeyError, OSError) as exc:  # shape mismatch: another base model
        raise ConfigError(f"cannot apply adapter {folder} to this model: {exc}") from exc
    tuned.eval()
    return tuned.merge_and_unload()
