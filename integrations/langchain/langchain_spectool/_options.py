"""The middleware's and the wrappers' options, checked where they are given (not as a WARNING
on every model call and a run without speculation): spectool's ``Speculator`` checks them, so
an unknown name gets its "did you mean" and a bad value the range it must lie in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spectool import ConfigError, Speculator

__all__ = ["check_options"]

#: Speculator arguments that are each conversation's own, never an option given once for all
_PER_CONVERSATION = ("cache", "trace", "on_complete")


def check_options(options: Mapping[str, Any], max_sessions: Any) -> dict[str, Any]:
    """The core's options, checked: ConfigError naming the bad one."""
    if not (isinstance(max_sessions, int) and not isinstance(max_sessions, bool) and max_sessions >= 1):
        raise ConfigError(f"max_sessions must be an int >= 1; got {max_sessions!r}")
    ttl = options.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
        raise ConfigError(f"ttl must be positive seconds or None; got {ttl!r}")
    own = sorted(set(options) & set(_PER_CONVERSATION))
    if own:
        raise ConfigError(f"SpeculativeToolMiddleware: unknown option(s) {own}: each conversation's own")
    try:
        Speculator([], None, **options)  # the core's own checks, now rather than per call
    except (TypeError, ValueError) as exc:  # ConfigError is a ValueError
        raise ConfigError(f"SpeculativeToolMiddleware: {exc}") from exc
    return dict(options)
