"""Speculable tools: the decorator, effects, tool specs and the registry.

A tool declares its *effect*; only ``pure`` and ``read_only`` tools may run early.

* ``pure``      the result depends only on the arguments: reusable within a TTL.
* ``read_only`` reads state but changes none: a speculative result is valid only if no
                mutating tool of the same *scope* ran since it started (state epochs).
* ``mutating``  (the default) changes state: never run early.

Orthogonal to the effect, ``external=True`` marks a tool that reaches a third party (a web
search, a SaaS API). Running it early tells that party what the user may be about to ask, for
a call the model may never make; so an external tool is not run early unless the session opts
in (``speculate_external=True``). Its results are still served by the cache once the model
asks (pure ones within their TTL).

``gated=True`` marks a tool behind a gate spectool cannot see (a human approval, a guardrail
that may reject the call): it never runs before the model's call has been let through, whatever
its effect or the session's options. The framework integrations set it from each framework's
own gates (LangChain ``interrupt_on``, the Agents SDK's ``needs_approval`` …).
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import anyio.to_thread
import pydantic

from ._options import did_you_mean
from .errors import ConfigError, ToolArgumentsError, ToolDefinitionError, ToolNotFoundError
from .keys import KeyFunction, canonical_key, parse_arguments

__all__ = ["Effect", "ToolSpec", "Toolbox", "tool", "tool_spec"]

F = TypeVar("F", bound=Callable[..., Any])
_ATTR = "__spectool_tool__"


class Effect(str, enum.Enum):
    """What running a tool does to the world; decides whether it may run early."""

    PURE = "pure"
    READ_ONLY = "read_only"
    MUTATING = "mutating"

    @property
    def speculable(self) -> bool:
        return self is not Effect.MUTATING


@dataclass(frozen=True)
class ToolSpec:
    """Everything spectool knows about one tool. Built by :func:`tool` or :meth:`from_schema`."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    effect: Effect = Effect.MUTATING
    #: State scope for read_only/mutating tools: a mutating call bumps its scope's epoch.
    scope: str = "default"
    #: Seconds a pure result stays reusable; None = for the whole session.
    ttl: float | None = None
    key_function: KeyFunction | None = None
    #: Concurrent speculative runs of this tool at most (None = only the global limit).
    max_concurrency: int | None = None
    #: Reaches outside the process (a third party sees each run): not run early unless the
    #: session opts in with ``speculate_external=True``.
    external: bool = False
    #: Behind an approval or guardrail spectool cannot see: never run before the model's call
    #: is let through (no drafts, no eager start), whatever the effect.
    gated: bool = False
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    validator: Callable[[dict[str, Any]], dict[str, Any]] | None = field(
        default=None, compare=False, repr=False
    )
    #: False for a plain function offered without ``@tool`` (mutating by default): the
    #: session's INFO line says so, since the user may have meant to declare it.
    declared: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.effect, Effect):
            object.__setattr__(self, "effect", _effect(self.effect))
        _check_spec(self)

    @property
    def speculable(self) -> bool:
        return self.effect.speculable

    def key(self, arguments: str | Mapping[str, Any] | None) -> str:
        """The canonical cache key of a call to this tool.

        The key is :func:`spectool.keys.canonical_key` of the wire arguments and this tool's
        JSON schema: the very function the engine's tool-output store applies to the same
        arguments, so client and server keys agree by construction. With a validator (every
        ``@tool``) the arguments are validated first: a call the tool would refuse raises
        ToolArgumentsError, as running it would. The canonical form only makes coercions the
        validator makes too, so equal keys mean the function receives equal arguments.
        """
        if self.validator is not None:
            self.validate(arguments)
        return self._key_of(parse_or_raise(self, arguments), self.parameters)

    def _key_of(self, arguments: Mapping[str, Any], schema: Mapping[str, Any] | None) -> str:
        try:
            return canonical_key(self.name, arguments, schema, self.key_function)
        except ValueError as exc:
            raise ToolArgumentsError(f"tool {self.name!r}: {exc}", tool=self.name) from exc

    def validate(self, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parsed, validated arguments; ToolArgumentsError names the tool and the field."""
        args = parse_or_raise(self, arguments)
        if self.validator is None:
            return args
        try:
            return self.validator(args)
        except pydantic.ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or None
            raise ToolArgumentsError(
                f"tool {self.name!r}: argument {where!r}: {err.get('msg')}"
                + (f" ({exc.error_count()} errors)" if exc.error_count() > 1 else ""),
                tool=self.name,
                field=where,
            ) from exc

    async def invoke(self, arguments: str | Mapping[str, Any] | None) -> Any:
        """Validate and run the tool; sync functions run in a worker thread."""
        if self.fn is None:
            raise ToolDefinitionError(f"tool {self.name!r} has no function to run", tool=self.name)
        args = self.validate(arguments)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**args)
        result = await anyio.to_thread.run_sync(functools.partial(self.fn, **args))
        if inspect.isawaitable(result):
            return await result
        return result

    def openai_chat(self) -> dict[str, Any]:
        """The tool as a Chat Completions ``tools=[...]`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def openai_responses(self) -> dict[str, Any]:
        """The tool as a Responses API ``tools=[...]`` entry (flat function tool)."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }

    @classmethod
    def from_schema(
        cls, schema: Mapping[str, Any], fn: Callable[..., Any] | None = None, **options: Any
    ) -> ToolSpec:
        """A spec from an OpenAI tool schema (chat or responses shape) and an optional function."""
        body = schema.get("function", schema)
        if "name" not in body:
            raise ToolDefinitionError("tool schema has no 'name'")
        return cls(
            name=body["name"],
            description=body.get("description", "") or "",
            parameters=body.get("parameters") or {"type": "object", "properties": {}},
            fn=fn,
            **options,  # an effect name becomes an Effect in __post_init__
        )


def parse_or_raise(spec: ToolSpec, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        return parse_arguments(arguments)
    except ValueError as exc:
        raise ToolArgumentsError(f"tool {spec.name!r}: {exc}", tool=spec.name) from exc


def json_round_trip(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """``arguments`` as the model would send them: through JSON text and back, or None if
    they hold something JSON cannot carry (a tuple, a non-string key, an object, NaN).

    A drafter's proposal is run and keyed in this form only, so a drafted ``(1, 2)`` or
    ``{1: "x"}`` never stands in for the model's ``[1, 2]`` or ``{"1": "x"}``.
    """
    try:
        text = json.dumps(arguments, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    if not _json_exact(arguments):
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


def _json_exact(value: Any) -> bool:
    """True if JSON carries ``value`` unchanged (json.dumps turns tuples into lists and int
    keys into strings without complaint; those must not pass for the JSON form)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def _effect(value: Any) -> Effect:
    try:
        return Effect(value)
    except ValueError as exc:
        allowed = [e.value for e in Effect]
        raise ToolDefinitionError(
            f"effect must be one of {', '.join(allowed)}; got {value!r}{did_you_mean(value, allowed)}"
        ) from exc


def _check_spec(spec: ToolSpec) -> None:
    """ToolDefinitionError for an option out of range, naming the tool and the option."""

    def bad(option: str, wanted: str) -> ToolDefinitionError:
        value = getattr(spec, option)
        return ToolDefinitionError(
            f"tool {spec.name!r}: {option} must be {wanted}, got {value!r}", tool=spec.name
        )

    if not isinstance(spec.name, str) or not spec.name:
        raise ToolDefinitionError(f"a tool name must be a non-empty string, got {spec.name!r}")
    if not isinstance(spec.scope, str) or not spec.scope:
        raise bad("scope", "a non-empty string (the state the tool reads or writes)")
    ttl = spec.ttl
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0):
        raise bad("ttl", "None or a number of seconds >= 0")
    limit = spec.max_concurrency
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise bad("max_concurrency", "None or an int >= 1")
    for flag in ("external", "gated"):
        if not isinstance(getattr(spec, flag), bool):
            raise bad(flag, "True or False")


def _build_spec(fn: Callable[..., Any], options: dict[str, Any]) -> ToolSpec:
    if not callable(fn):
        raise ToolDefinitionError(f"@tool needs a function, got {type(fn).__name__}")
    name = options.pop("name", None) or getattr(fn, "__name__", None)
    if not name:
        raise ToolDefinitionError("cannot name this tool; pass name=...")
    description = options.pop("description", None)
    if description is None:
        description = inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0].strip()
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name!r}: *args/**kwargs cannot be described", tool=name)
    try:
        adapter = pydantic.TypeAdapter(
            pydantic.create_model(  # type: ignore[call-overload]
                f"{name}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid"),
                **{
                    p.name: (
                        Any if p.annotation is p.empty else p.annotation,
                        ... if p.default is p.empty else p.default,
                    )
                    for p in sig.parameters.values()
                },
            )
        )
        schema = adapter.json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot build a schema: {exc}", tool=name) from exc
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)

    def validate(args: dict[str, Any]) -> dict[str, Any]:
        model = adapter.validate_python(args)
        return {k: getattr(model, k) for k in sig.parameters}

    return ToolSpec(
        name=name,
        description=description,
        parameters=schema,
        fn=fn,
        validator=validate,
        **options,  # an effect name becomes an Effect in __post_init__
    )


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(
    *,
    effect: Effect | str = ...,
    name: str | None = ...,
    description: str | None = ...,
    scope: str = ...,
    ttl: float | None = ...,
    key: KeyFunction | None = ...,
    max_concurrency: int | None = ...,
    external: bool = ...,
    gated: bool = ...,
) -> Callable[[F], F]: ...
def tool(fn: Any = None, /, **options: Any) -> Any:
    """Declare a plain sync or async function a tool; returns the function unchanged.

    Bare ``@tool`` makes a *mutating* tool (never run early). ``@tool(effect="pure")`` or
    ``effect="read_only"`` lets spectool run it speculatively. ``external=True`` marks a tool
    that calls a third party: it runs early only where the session opts in. ``gated=True``
    marks a tool behind an approval or guardrail: it never runs early.
    """
    allowed = {"effect", "name", "description", "scope", "ttl", "key", "max_concurrency", "external", "gated"}
    unknown = set(options) - allowed
    if unknown:
        named = ", ".join(f"{u!r}{did_you_mean(u, allowed)}" for u in sorted(unknown))
        raise ToolDefinitionError(f"unknown @tool option(s): {named}; valid: {', '.join(sorted(allowed))}")
    if "key" in options:
        options["key_function"] = options.pop("key")

    def decorate(f: F) -> F:
        spec = _build_spec(f, dict(options))
        try:
            setattr(f, _ATTR, spec)
        except (AttributeError, TypeError) as exc:
            raise ToolDefinitionError(f"cannot attach a tool spec to {f!r}", tool=spec.name) from exc
        return f

    return decorate if fn is None else decorate(fn)


def tool_spec(obj: Any) -> ToolSpec:
    """The spec of a decorated function (or a ToolSpec itself)."""
    if isinstance(obj, ToolSpec):
        return obj
    spec = getattr(obj, _ATTR, None)
    if spec is None:
        # Undecorated plain functions are accepted as mutating tools: never speculated.
        if callable(obj):
            return _build_spec(obj, {"declared": False})
        raise ToolDefinitionError(f"{obj!r} is not a tool")
    return spec


class Toolbox:
    """A registry of tools by name; emits OpenAI tool lists and keys calls."""

    def __init__(self, tools: Iterable[Any] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        if (
            callable(tools)
            or isinstance(tools, (str, bytes, Mapping, ToolSpec))
            or not isinstance(tools, Iterable)
        ):
            one = getattr(tools, "__name__", None) or getattr(tools, "name", None)
            hint = f": pass [{one}]" if isinstance(one, str) and one else ""
            raise ConfigError(
                f"tools must be a list of tools (functions, ToolSpecs) or a Toolbox; got "
                f"{type(tools).__name__} {tools!r:.60}{hint}"
            )
        for t in tools:
            self.add(t)

    def add(self, obj: Any) -> ToolSpec:
        spec = tool_spec(obj)
        if spec.name in self._specs and self._specs[spec.name] is not spec:
            raise ToolDefinitionError(f"two tools are named {spec.name!r}", tool=spec.name)
        self._specs[spec.name] = spec
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self):
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, name: str) -> ToolSpec:
        try:
            return self._specs[name]
        except KeyError:
            known = ", ".join(sorted(self._specs)) or "none"
            raise ToolNotFoundError(f"no tool named {name!r} (known: {known})", tool=name) from None

    def key(self, name: str, arguments: str | Mapping[str, Any] | None) -> str:
        return self.get(name).key(arguments)

    def openai_tools(self, api: str = "chat") -> list[dict[str, Any]]:
        """``tools=[...]`` for ``api="chat"`` (Chat Completions) or ``"responses"``."""
        if api == "chat":
            return [s.openai_chat() for s in self._specs.values()]
        if api == "responses":
            return [s.openai_responses() for s in self._specs.values()]
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
