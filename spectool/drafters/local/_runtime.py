"""Which runtime runs a :class:`~._local.LocalDrafter`: transformers or llama.cpp.

``LocalDrafterOptions.runtime`` is ``"transformers"``, ``"llama.cpp"`` or ``"auto"``.
:func:`choose_runtime` settles it once, when the drafter is made, without loading or fetching
anything: an explicit ``"llama.cpp"`` that cannot run here (``llama_cpp`` missing, a model that
is no GGUF, an option only the transformers decoder has) is a ConfigError that says why;
``"auto"`` takes llama.cpp only where it can run and the base is one where it measured faster
at equal α (:data:`LLAMA_CPP_BASES`, docs/drafters.md), transformers otherwise.
Pure: imports neither torch nor llama_cpp.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any, Literal

from ...errors import ConfigError

if TYPE_CHECKING:
    from ._options import LocalDrafterOptions

__all__ = ["LLAMA_CPP_BASES", "choose_runtime", "llama_available", "require_llama_cpp"]

#: Bases whose drafts "auto" runs on llama.cpp when it is installed: where its Q4 kernels beat
#: transformers int8 on g at equal α (docs/drafters.md, "base × runtime"). Keys: model names as
#: LocalDrafter takes them ("embedded" for the default SmolLM2). Empty as measured on 2026-11-26:
#: transformers int8 with jump-forward drafted 2–3× faster than llama.cpp Q4 (which decodes every
#: schema-forced token) on SmolLM2-135M and Qwen2.5-Coder-0.5B, at the same α.
LLAMA_CPP_BASES: frozenset[str] = frozenset()

_INSTALL = (
    "the llama.cpp runtime needs llama-cpp-python 0.3.36: bash scripts/build_llamacpp.sh "
    "(builds it from its sdist once per CPU kind; the set-up runs it when asked, docs/drafters.md), "
    "or pip install 'spectool[llamacpp]'"
)


def llama_available() -> bool:
    """Whether ``llama_cpp`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def require_llama_cpp() -> None:
    """A ConfigError naming the set-up step when ``llama_cpp`` is missing."""
    if not llama_available():
        raise ConfigError(_INSTALL)


def _base_name(model: Any) -> str | None:
    """The GGUF base ``model`` names, without fetching it: "embedded", a named model, a
    ``.gguf`` path; None for an HF folder or id, or a loaded (model, tokenizer) pair."""
    from ...embedded import NAMED_MODELS
    from ._loading import DEFAULT_LOCAL_MODEL, _hub_cached

    if isinstance(model, tuple):
        return None
    text = "" if model is None else os.fspath(model)
    if text in ("", "embedded") or (text == DEFAULT_LOCAL_MODEL and not _hub_cached(text)):
        return "embedded"
    if text in NAMED_MODELS or text.endswith(".gguf"):
        return text
    return None


def _unsupported(options: LocalDrafterOptions, adapter: Any) -> list[str]:
    """What the llama.cpp path does not do (yet): the transformers decoder's extras."""
    out = []
    if adapter is not None:
        out.append("a tuned adapter (LoRA in GGUF is not wired yet)")
    if options.diversity == "beam":
        out.append("diversity='beam'")
    if options.min_confidence > 0:
        out.append("min_confidence > 0 (the gate needs row log-probabilities)")
    if options.copy_bias not in (0, 0.0, "auto"):
        out.append("copy_bias > 0")
    if not options.constrained:
        out.append("constrained=False")
    if options.dtype != "auto":  # a transformers knob: llama.cpp runs the GGUF's own quantization
        out.append(f"dtype={options.dtype!r}")
    return out


def choose_runtime(
    options: LocalDrafterOptions, model: Any, adapter: Any = None
) -> Literal["transformers", "llama.cpp"]:
    """The runtime a drafter with these options, model and adapter runs on (see module doc)."""
    if options.runtime == "transformers":
        return "transformers"
    base = _base_name(model)
    missing = _unsupported(options, adapter)
    if options.runtime == "auto":
        if base in LLAMA_CPP_BASES and not missing and llama_available():
            return "llama.cpp"
        return "transformers"
    if base is None:
        missing.insert(
            0, f"model {model!r} (llama.cpp loads GGUF files: 'embedded', a named model, a .gguf path)"
        )
    if missing:  # said before a missing package: installing it would not help
        raise ConfigError(
            "runtime='llama.cpp' does not support " + ", ".join(missing) + "; use runtime='transformers'"
        )
    require_llama_cpp()
    return "llama.cpp"
