"""Drafter specs of ``spectool drafters eval --drafters``: one word names one drafter variant.

    history                      the free history drafter
    mined                        history mined from the category's train split
    learning                     the learning drafter from nothing (learns as the tasks go by)
    learning+train               the learning drafter primed with the category's train split
    tuned                        SmolLM2 + the shipped adapter (``--adapter`` for another)
    tuned,choose_values=1        the same, choosing copied values among value selection's
                                 candidates (patterns primed with the train split)
    tuned+learning               learning+train and tuned in one CombinedDrafter, sharing the
                                 learning drafter's patterns (``local+learning``: any base)
    local:qwen2.5-coder-0.5b,prompt=native,diversity=beam,min_confidence=0.3

A spec is ``NAME[:MODEL]`` followed by ``key=value`` words: the model drafters (``local``,
``tuned``, ``combined``, ``tuned+mined``, ``tuned+learning``, ``local+learning``) take a base
model (else ``--model``, else the embedded one) and :class:`~spectool.drafters.LocalDrafterOptions`
fields, parsed and checked by
:meth:`LocalDrafterOptions.from_strings`, so every row of a table is one command and a results
row names its drafter by the whole spec. Since ``--drafters`` is comma-separated, a
``key=value`` word belongs to the spec before it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectool.drafters import LocalDrafterOptions
from spectool.errors import ConfigError

__all__ = ["DRAFTERS", "MODEL_DRAFTERS", "TUNED", "DrafterSpec", "factories", "parse_specs"]


# --- drafter names -> constructors (heavy imports happen only when a drafter is built) ---------


def _history(category: str = "") -> Any:
    from spectool.drafters import HistoryDrafter

    return HistoryDrafter()


def _mined(category: str = "") -> Any:
    from spectool.drafters import HistoryDrafter

    from ..workloads._replay import train_traces

    return HistoryDrafter.from_traces(train_traces(category) if category else ())


def _learning(category: str = "") -> Any:
    from spectool.drafters import LearningDrafter

    return LearningDrafter()  # from nothing: learns from the tasks it has drafted for


def _learning_train(category: str = "") -> Any:
    from spectool.drafters import LearningDrafter

    from ..workloads._replay import train_traces

    return LearningDrafter(train_traces(category) if category else ())


def _values(category: str, options: LocalDrafterOptions | None, values: Any = None) -> Any:
    """The learning drafter a ``choose_values`` model drafter reads its copied parameters from:
    ``values`` where given (a combined drafter's member), else one primed with the train split."""
    if values is not None or options is None or not options.choose_values:
        return values
    return _learning_train(category)


def _local(
    category: str = "",
    model: str | None = None,
    options: LocalDrafterOptions | None = None,
    values: Any = None,
) -> Any:
    from spectool.drafters import LocalDrafter

    return LocalDrafter(model or "embedded", options, values=_values(category, options, values))


def _tuned(
    category: str = "",
    adapter: Path | None = None,
    model: str | None = None,
    options: LocalDrafterOptions | None = None,
    values: Any = None,
) -> Any:
    from spectool.drafters import LocalDrafter, shipped_adapter_path

    # the shipped adapter unless --adapter names another (ConfigError if it is missing)
    return LocalDrafter(
        model or "embedded",
        options,
        adapter=adapter or shipped_adapter_path(),
        values=_values(category, options, values),
    )


def _with_mined(member: Callable[..., Any]) -> Callable[..., Any]:
    """The mined history drafter and the model drafter ``member`` in one CombinedDrafter."""

    def build(category: str = "", **keywords: Any) -> Any:
        from spectool.drafters import CombinedDrafter

        return CombinedDrafter([_mined(category), member(category, **keywords)], rank="confidence")

    return build


def _with_learning(member: Callable[..., Any]) -> Callable[..., Any]:
    """learning+train and the model drafter ``member`` in one CombinedDrafter, sharing one
    learner: it drafts and feeds the model drafter's value choices."""

    def build(category: str = "", **keywords: Any) -> Any:
        from spectool.drafters import CombinedDrafter

        learner = _learning_train(category)
        return CombinedDrafter([learner, member(category, values=learner, **keywords)], rank="confidence")

    return build


DRAFTERS: dict[str, Callable[..., Any]] = {
    "combined": _with_mined(_local),
    "history": _history,
    "learning": _learning,
    "learning+train": _learning_train,
    "local": _local,
    "local+learning": _with_learning(_local),
    "mined": _mined,
    "tuned": _tuned,
    "tuned+learning": _with_learning(_tuned),
    "tuned+mined": _with_mined(_tuned),
}
TUNED = ("tuned", "tuned+mined", "tuned+learning")
MODEL_DRAFTERS = ("local", "combined", "local+learning", *TUNED)


@dataclass(frozen=True)
class DrafterSpec:
    """One parsed ``--drafters`` spec: the drafter's name, its base model and its options."""

    name: str
    model: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """The spec as written (canonical spacing): the results row's ``drafter``."""
        head = f"{self.name}:{self.model}" if self.model else self.name
        return ",".join([head, *(f"{k}={v}" for k, v in self.options)])

    def local_options(self) -> LocalDrafterOptions | None:
        """The spec's options, checked (None: the drafter's defaults)."""
        return LocalDrafterOptions.from_strings(dict(self.options)) if self.options else None


def _head(word: str) -> DrafterSpec:
    name, sep, model = word.partition(":")
    if name not in DRAFTERS:
        raise ConfigError(f"unknown drafter {name!r} in {word!r}; known: {', '.join(DRAFTERS)}")
    if sep and name not in MODEL_DRAFTERS:
        raise ConfigError(
            f"{name!r} takes no model ({word!r}); the model drafters: {', '.join(MODEL_DRAFTERS)}"
        )
    if sep and not model.strip():
        raise ConfigError(f"{word!r}: no model after ':'")
    return DrafterSpec(name, model.strip() or None)


def parse_specs(words: Sequence[str]) -> list[DrafterSpec]:
    """Specs from the comma-split words of ``--drafters``; every problem is a ConfigError."""
    specs: list[DrafterSpec] = []
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            specs.append(_head(word))
            continue
        if not specs:
            raise ConfigError(f"option {word!r} comes before any drafter (write e.g. local,{word})")
        last = specs[-1]
        if last.name not in MODEL_DRAFTERS:
            raise ConfigError(
                f"{last.name!r} takes no options ({word!r}); "
                f"the model drafters do: {', '.join(MODEL_DRAFTERS)}"
            )
        if not key.strip() or key.strip() in dict(last.options):
            raise ConfigError(f"option {word!r} of {last.label!r}: no name, or the name given twice")
        specs[-1] = DrafterSpec(last.name, last.model, (*last.options, (key.strip(), value.strip())))
    if not specs:
        raise ConfigError(f"no drafter given; known: {', '.join(DRAFTERS)}")
    labels = [s.label for s in specs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(f"drafter(s) given twice: {', '.join(twice)}")
    for spec in specs:
        spec.local_options()  # a bad option fails here, before any drafter is built
    return specs


def factories(
    words: Sequence[str], adapter: Path | None = None, model: str | None = None
) -> dict[str, Callable[[str], Any]]:
    """Label -> factory(category) for each spec; ``adapter`` / ``model``: the command's defaults."""
    specs = parse_specs(words)
    names = {s.name for s in specs}
    if adapter is not None and not set(TUNED) & names:
        raise ConfigError("--adapter is for the tuned drafters: add tuned or tuned+mined to --drafters")
    if model is not None and not set(MODEL_DRAFTERS) & names:
        raise ConfigError(f"--model is for the model drafters: add one of {', '.join(MODEL_DRAFTERS)}")

    def make(spec: DrafterSpec) -> Callable[[str], Any]:
        keywords: dict[str, Any] = {"adapter": adapter} if spec.name in TUNED else {}
        if spec.name in MODEL_DRAFTERS:
            keywords.update(model=spec.model or model, options=spec.local_options())
        build = DRAFTERS[spec.name]
        return functools.partial(build, **keywords) if keywords else build

    return {s.label: make(s) for s in specs}
