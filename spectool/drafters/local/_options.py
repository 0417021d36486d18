"""LocalDrafterOptions: how a :class:`~._local.LocalDrafter` drafts, in one frozen object.

Every field is checked when the object is made, so a bad value is a :class:`ConfigError` at
construction, never a failure in the drafting thread. Fields marked "auto" take their value from
whether the drafter runs a tuned adapter (:meth:`LocalDrafterOptions.resolved`): an untuned base
stops at its first complete call with short strings, a tuned one writes whole responses.
Pure: no torch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from ...errors import ConfigError
from ._quant import DTYPES

__all__ = ["TUNED_LIMITS", "UNTUNED_LIMITS", "LocalDrafterOptions", "from_keywords"]

#: Answer limits of an untuned model: it has not learnt where an answer ends, so it stops at
#: the first complete call and its strings are cut short (a rambling string costs g).
UNTUNED_LIMITS: dict[str, Any] = {"max_calls": 1, "max_string_length": 64, "copy_bias": 0.0}
#: A tuned adapter was trained on whole responses (parallel calls, long string answers) and
#: closes them itself: up to 4 calls (BFCL parallel answers hold ≤ 4) and strings unbounded in
#: the grammar (``max_new_tokens`` bounds a runaway). Its copy bias of 1 nat was picked on the
#: BFCL dev split (0 / 1 / 2: 52 / 55 / 53 of 113 speculable calls, four categories, λ = 1).
TUNED_LIMITS: dict[str, Any] = {"max_calls": 4, "max_string_length": None, "copy_bias": 1.0}

Prompt = Literal["compact", "native"]
Diversity = Literal["branch", "sample", "beam"]
Runtime = Literal["transformers", "llama.cpp", "auto"]


@dataclass(frozen=True)
class LocalDrafterOptions:
    """How a local drafter prompts, decodes and spends its λ rows.

    * ``prompt``: ``"compact"`` (tool signatures + recent messages, the format the shipped
      adapter is tuned on; a JSON array answer) or ``"native"`` (the model's own chat template
      with ``tools=``, answering in its own tool-call format, e.g. Qwen's
      ``<tool_call>{json}</tool_call>``; for instruct models that were taught tool calling).
    * ``diversity``: how λ > 1 rows differ. ``"branch"``: row 0 greedy, the others fork it at
      its least sure steps; ``"sample"``: rows sampled at ``temperature``/``top_p`` (row 0
      greedy with ``greedy_first``); ``"beam"``: grammar-constrained beam search of width λ,
      rows deduplicated by canonical call and ranked by sequence log-probability.
    * ``min_confidence``: the gate. A draft whose best row has a probability (under the grammar)
      below this proposes nothing; 0 turns it off.
    * ``max_calls`` / ``max_string_length`` / ``copy_bias``: "auto" picks :data:`TUNED_LIMITS`
      with an adapter, :data:`UNTUNED_LIMITS` without. ``max_string_length`` None: unbounded.
    * ``runtime``: ``"transformers"``, ``"llama.cpp"`` (the GGUF as shipped, through
      llama-cpp-python: the optional ``spectool[llamacpp]``) or ``"auto"`` (llama.cpp where it
      is installed, can run these options and measured faster for the base; see :mod:`._runtime`).
      ``threads``: llama.cpp's compute threads (0: every usable core; torch keeps its own).
    * ``dtype``: one of ``auto`` (int8 weights where torch has a quantized CPU engine),
      ``float32``, ``bfloat16``, ``float16``, ``int8``.
    * ``max_tools`` / ``described``: the compact prompt's tool list (how many listed, how many
      keep a description); ``max_prompt_tokens``: the native prompt drops its oldest turns to fit.
    * ``narrow_tools``: the grammar lets the draft name only the tools that rank in the top k by
      the words they share with the last user message (ties at the k-th score stay in); the
      prompt still shows every candidate. 0 turns it off.
    * ``choose_values``: where the mined flows say a parameter's value is copied, the grammar
      admits only the candidate values that value selection ranks (:mod:`._choices`), so the
      model chooses instead of writing; the others keep their free schema.
    """

    prompt: Prompt = "compact"
    runtime: Runtime = "auto"
    threads: int = 0
    constrained: bool = True
    dtype: str = "auto"
    max_new_tokens: int = 192
    max_calls: int | Literal["auto"] = "auto"
    max_string_length: int | None | Literal["auto"] = "auto"
    copy_bias: float | Literal["auto"] = "auto"
    diversity: Diversity = "branch"
    temperature: float = 0.8
    top_p: float = 0.95
    greedy_first: bool = True
    min_confidence: float = 0.0
    jump_forward: bool = True
    prefix_cache: bool = True
    max_tools: int = 32
    described: int = 6
    max_prompt_tokens: int = 2048
    narrow_tools: int = 0
    choose_values: bool = False

    def __post_init__(self) -> None:
        problems = [p for p in (_check(self, f.name) for f in fields(self)) if p]
        if self.diversity == "beam" and self.constrained is False:
            problems.append("diversity='beam' searches under the grammar: it needs constrained=True")
        if self.narrow_tools and self.constrained is False:
            problems.append("narrow_tools narrows the grammar: it needs constrained=True")
        if self.choose_values and self.constrained is False:
            problems.append("choose_values narrows the grammar: it needs constrained=True")
        if problems:
            raise ConfigError("invalid LocalDrafterOptions: " + "; ".join(problems))

    def resolved(self, tuned: bool) -> LocalDrafterOptions:
        """A copy with every "auto" limit replaced by the tuned or untuned default."""
        limits = TUNED_LIMITS if tuned else UNTUNED_LIMITS
        return replace(
            self,
            **{
                k: limits[k]
                for k in ("max_calls", "max_string_length", "copy_bias")
                if getattr(self, k) == "auto"
            },
        )

    @classmethod
    def from_strings(
        cls, pairs: Mapping[str, str], base: LocalDrafterOptions | None = None
    ) -> LocalDrafterOptions:
        """Options from ``name -> text`` pairs (a command line's ``prompt=native,min_confidence=0.3``).

        Each text becomes a bool (true/false; 1/0 for a flag), None (none), an int, a float or else stays a
        string; the fields' own checks then judge it, so a wrong type or value is the same
        :class:`ConfigError` as in Python. An unknown name is one too, with the known ones listed.
        """
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(pairs) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown LocalDrafterOptions field(s) {', '.join(unknown)}; known: {', '.join(known)}"
            )
        flags = {f.name for f in fields(cls) if isinstance(f.default, bool)}
        typed = {k: _typed(v) for k, v in pairs.items()}
        # a flag also reads 1 / 0 (``choose_values=1``)
        typed = {
            k: bool(v) if k in flags and v in (0, 1) and not isinstance(v, float) else v
            for k, v in typed.items()
        }
        return replace(base or cls(), **typed)


def _typed(text: str) -> Any:
    """The value a command-line word stands for (the field checks judge it afterwards)."""
    word = text.strip()
    literal = {"true": True, "false": False, "none": None}.get(word.lower(), word)
    if literal is not word:
        return literal
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check(options: LocalDrafterOptions, name: str) -> str | None:
    """What is wrong with one field, or None."""
    value = getattr(options, name)
    ok = {
        "prompt": value in ("compact", "native"),
        "runtime": value in ("transformers", "llama.cpp", "auto"),
        "threads": _int_at_least(value, 0),
        "constrained": isinstance(value, bool),
        "dtype": value in DTYPES,
        "max_new_tokens": _int_at_least(value, 1),
        "max_calls": value == "auto" or _int_at_least(value, 1),
        "max_string_length": value in ("auto", None) or _int_at_least(value, 1),
        "copy_bias": value == "auto" or (_number(value) and value >= 0),
        "diversity": value in ("branch", "sample", "beam"),
        "temperature": _number(value) and value >= 0,
        "top_p": _number(value) and 0 < value <= 1,
        "greedy_first": isinstance(value, bool),
        "min_confidence": _number(value) and 0 <= value <= 1,
        "jump_forward": isinstance(value, bool),
        "prefix_cache": isinstance(value, bool),
        "max_tools": _int_at_least(value, 1),
        "described": _int_at_least(value, 0),
        "max_prompt_tokens": _int_at_least(value, 16),
        "narrow_tools": _int_at_least(value, 0),
        "choose_values": isinstance(value, bool),
    }[name]
    if ok:
        return None
    allowed = {
        "prompt": "'compact' or 'native'",
        "runtime": "'transformers', 'llama.cpp' or 'auto'",
        "dtype": " / ".join(DTYPES),
        "max_calls": "an integer ≥ 1 or 'auto'",
        "max_string_length": "an integer ≥ 1, None (unbounded) or 'auto'",
        "copy_bias": "a finite number ≥ 0 or 'auto'",
        "diversity": "'branch', 'sample' or 'beam'",
        "top_p": "a number in (0, 1]",
        "min_confidence": "a probability in [0, 1]",
        "temperature": "a finite number ≥ 0",
        "max_prompt_tokens": "an integer ≥ 16",
        "described": "an integer ≥ 0",
        "threads": "an integer ≥ 0 (0: every usable core)",
        "narrow_tools": "an integer ≥ 0 (0: off)",
    }.get(name, "a bool" if isinstance(getattr(LocalDrafterOptions, name, None), bool) else "an integer ≥ 1")
    return f"{name} must be {allowed} (got {value!r})"


def from_keywords(base: LocalDrafterOptions | None, keywords: Mapping[str, Any]) -> LocalDrafterOptions:
    """Options from the keywords ``LocalDrafter`` took before it took an options object.

    Kept for callers written against the old signature (a ``DeprecationWarning`` says how to
    move); the variants that lost their measurements are refused by name.
    """
    changes = dict(keywords)
    if (
        changes.get("prompt") == "examples"
        or "examples" in changes
        or changes.get("decoder", "fast") != "fast"
    ):
        raise ConfigError(
            "the worked-examples prompt and the generate decoder left spectool (they lost every "
            "measurement to the compact prompt and the fast decoder); use "
            "LocalDrafterOptions(prompt='compact' | 'native')"
        )
    changes.pop("decoder", None)
    compact = changes.pop("compact_options", None) or {}
    changes.update({k: v for k, v in compact.items() if k in ("max_tools", "described")})
    unknown = sorted(set(changes) - {f.name for f in fields(LocalDrafterOptions)})
    if unknown:
        raise ConfigError(f"unknown LocalDrafter option(s): {', '.join(unknown)}")
    warnings.warn(
        "LocalDrafter(model, name=value, …) is deprecated: pass LocalDrafter(model, LocalDrafterOptions(…))",
        DeprecationWarning,
        stacklevel=3,
    )
    return replace(base or LocalDrafterOptions(), **changes)
