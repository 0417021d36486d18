"""A drafter served by the engine: ``EndpointDrafter`` pointed at ``spectool serve``'s app asks
for λ schema-constrained calls in one request (``n``), and the engine decodes the λ choices as
rows of one batch through the captured step's code (``graphs="static"``: what a GPU replays,
run uncaptured on the CPU)."""

from __future__ import annotations

import asyncio

import httpx

from spectool import DraftRequest
from spectool.drafters import EndpointDrafter
from spectool_serving.app import create_app
from spectool_serving.engine import Engine
from spectool_serving.runner import Runner
from spectool_serving.scheduler import Scheduler
from spectool_serving.store import ToolOutputStore

# closed value sets: a random model's free strings run long before the grammar closes them,
# an enum or a boolean closes in a few tokens, so every choice ends within the 40 tokens
FORECAST = {
    "type": "function",
    "function": {
        "name": "forecast",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo"]},
                "hourly": {"type": "boolean"},
            },
            "required": ["city", "hourly"],
        },
    },
}
ALERTS = {
    "type": "function",
    "function": {
        "name": "alerts",
        "parameters": {
            "type": "object",
            "properties": {"region": {"type": "string", "enum": ["north", "south"]}},
            "required": ["region"],
        },
    },
}


def _propose(engine: Engine, samples: int) -> list:
    app = create_app(engine)

    async def go():
        import openai

        client = openai.AsyncOpenAI(
            api_key="EMPTY",
            base_url="http://t/v1",
            http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app), timeout=600),
        )
        drafter = EndpointDrafter(client, model="m", max_tokens=40, tool_choice="required", timeout=600)
        ask = [{"role": "user", "content": "What is the weather in Paris, and the time there?"}]
        return await drafter.propose(DraftRequest(ask, [FORECAST, ALERTS], samples=samples))

    try:
        return asyncio.run(go())
    finally:
        engine.stop()


def test_endpoint_drafter_gets_lambda_calls_from_batched_rows():
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder
    from spectool_serving.toolcalls import detect_format
    from tests.tree_fixtures import tiny_llama_for

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))  # the tokenizer only
    fmt = detect_format(getattr(tok, "chat_template", None), "")
    # a tiny random model over the real tokenizer: the grammar makes its output a valid call
    runner = Runner(tiny_llama_for(tok, seed=2), "cpu", graphs="static")
    engine = Engine(
        runner, tok, fmt, store=ToolOutputStore(), scheduler=Scheduler(max_batch=4), model_name="m"
    )
    graphs = runner.decode_graphs()  # the engine's stop frees it: keep a hold on its counters
    calls = _propose(engine, samples=3)
    assert calls and all(c.name in ("forecast", "alerts") for c in calls)
    assert all(
        c.arguments.get("city", c.arguments.get("region")) in ("Paris", "Oslo", "north", "south")
        for c in calls
    )
    c = engine.counters()
    assert c["requests"] == 3 and c["decode_rows"] > c["decode_steps"]  # λ rows in one batch
    assert graphs.stats.replays > 0  # ... through the captured step's code
