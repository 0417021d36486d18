"""The middleware's and the wrappers' options, checked where they are given: an unknown name
gets a "did you mean", a bad value the range it must lie in (not a WARNING on every model
call and a run without speculation)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from spectool import ConfigError, Speculator, ToolCache

__all__ = ["check_options"]

#: the keywords of SpeculativeToolMiddleware itself (the rest go to spectool's core)
OWN = ("drafter", "samples", "draft_timeout", "max_sessions", "safe_middleware")


def _accepted() -> set[str]:
    import inspect

    names: set[str] = set(OWN)
    for fn in (Speculator.__init__, ToolCache.__init__):
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in (
                "self",
                "tools",
                "toolbox",
            ):
                names.add(p.name)
    return names - {"cache", "trace", "on_complete"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_options(options: Mapping[str, Any], max_sessions: Any) -> dict[str, Any]:
    """The core's options, checked: ConfigError naming the bad one."""
    accepted = _accepted()
    for name in options:
        if name not in accepted:
            close = difflib.get_close_matches(name, sorted(accepted), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"SpeculativeToolMiddleware: unknown option {name!r}{hint} "
                f"(options: {', '.join(sorted(accepted))})"
            )
    if not (isinstance(max_sessions, int) and not isinstance(max_sessions, bool) and max_sessions >= 1):
        raise ConfigError(f"max_sessions must be an int >= 1; got {max_sessions!r}")
    ttl = options.get("ttl")
    if ttl is not None and not (_number(ttl) and ttl > 0):
        raise ConfigError(f"ttl must be positive seconds or None; got {ttl!r}")
    try:
        Speculator([], None, **options)  # the core's own range checks, now rather than per call
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"SpeculativeToolMiddleware: {exc}") from exc
    return dict(options)
