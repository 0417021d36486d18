"""Canonical keys of tool calls: the one key function the client cache and the engine's tool
output store share (stdlib only; implementation in :mod:`spectool._keys`)."""

from ._keys import KeyFunction, canonical_arguments, canonical_key, parse_arguments

__all__ = ["KeyFunction", "canonical_arguments", "canonical_key", "parse_arguments"]
