"""Fixtures for the serving tests: the real SmolLM2 is loaded once per test session."""

from __future__ import annotations

import json

import pytest

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": CITY},
}
#: A request that must call get_weather (greedy, 40 tokens): the one the lossless checks replay.
WEATHER_REQUEST = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [WEATHER],
    "tool_choice": "required",
    "temperature": 0,
    "max_tokens": 40,
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
