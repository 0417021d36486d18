"""Checks at the public entry points: the options a caller passed and the client it wrapped,
each refused with a message that names what was given and what is accepted (not a TypeError
from an internal class, or an AttributeError on the first request)."""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["check_client", "check_options", "did_you_mean", "option_names"]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a mistyped ``word``, or ''."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


#: the session options whose values are checked here: a test, and what it asks for
_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "ttl": (lambda v: v is None or (_number(v) and v >= 0), "None or a number of seconds >= 0"),
    "capacity": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an int >= 1"),
    "max_concurrency": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an int >= 1"),
}


@functools.cache
def _names_of(fn: Callable[..., Any]) -> frozenset[str]:
    skip = {"self", "client", "tools", "drafter"}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(fn).parameters.values()
    return frozenset(p.name for p in params if p.kind in kinds and p.name not in skip)


def option_names(*accepting: Callable[..., Any]) -> frozenset[str]:
    """The keyword options ``accepting`` (functions or classes) take, together."""
    return frozenset().union(*(_names_of(fn) for fn in accepting))


def check_options(options: Mapping[str, Any], where: str, *accepting: Callable[..., Any]) -> None:
    """ConfigError naming the unknown keys of ``options`` and listing the valid ones."""
    valid = option_names(*accepting)
    unknown = sorted(set(options) - valid)
    if unknown:
        named = ", ".join(f"{u!r}{did_you_mean(u, valid)}" for u in unknown)
        raise ConfigError(f"{where}: unknown option(s) {named}; valid options: {', '.join(sorted(valid))}")
    for name, (ok, wanted) in _VALUES.items():
        if name in options and not ok(options[name]):
            raise ConfigError(f"{where}: {name} must be {wanted}, got {options[name]!r}")


def _describe(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    return f"{module}.{cls.__qualname__}" if module != "builtins" else cls.__qualname__


def _creates(client: Any) -> Iterable[Any]:
    for path in (("chat", "completions", "create"), ("responses", "create")):
        obj = client
        for name in path:
            obj = getattr(obj, name, None)
            if obj is None:
                break
        if obj is not None and callable(obj):
            yield obj


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn)) or inspect.iscoroutinefunction(fn)


def check_client(client: Any, *, asynchronous: bool, where: str) -> None:
    """ConfigError unless ``client`` looks like the openai SDK client ``where`` wraps: an
    ``AsyncOpenAI`` (``asynchronous``) or an ``OpenAI``, or one with the same ``create``s."""
    wanted = "openai.AsyncOpenAI" if asynchronous else "openai.OpenAI"
    creates = list(_creates(client))
    if not creates:
        raise ConfigError(
            f"{where} wraps an {wanted} client (or one with chat.completions.create / "
            f"responses.create); got {_describe(client)}, which has neither"
        )
    if any(_is_async(c) for c in creates) != asynchronous:
        twin = "spectool.speculative_sync" if asynchronous else "spectool.speculative"
        raise ConfigError(
            f"{where} wraps an {wanted} client; got {_describe(client)}, "
            f"{'a synchronous' if asynchronous else 'an async'} client: wrap it with {twin}(...) "
            f"instead, or pass an {wanted}"
        )
