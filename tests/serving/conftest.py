"""Fixtures for the serving tests: the real SmolLM2 is loaded once per test session."""

from __future__ import annotations

import json

import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def weather_tool(args: dict) -> str:
    """The scripted tool both paths run (deterministic)."""
    return json.dumps({"city": args.get("city"), "temp_c": 21, "sky": "clear"})


@pytest.fixture(scope="session")
def smol():
    from spectool_serving.models import load_model

    return load_model()  # fp32, CPU


@pytest.fixture()
def engine(smol):
    """A fresh engine (own KV, counters, tool cache) around the shared weights."""
    from spectool_serving.server import build_engine

    eng = build_engine(loaded=smol)
    yield eng
    eng.stop()
