"""What the drafter tests share: the tools they draft against, the conversation messages they
build, and the tiny models they draft with.

The drafter's machinery (grammar, decode loop, caches, beam, tuning) does not depend on what a
model says, so those tests run a seeded random model of a few layers over SmolLM2's real
tokenizer: a Llama, or a Qwen2 stand-in for the Qwen2.5-Coder bases (SmolLM2's tokenizer given
Qwen2.5's chat template, ``qwen2_5_chat_template.jinja`` copied from the Qwen2.5-Coder-0.5B
GGUF, and its two tool-call tokens). What needs the real model carries the ``model`` marker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from spectool.drafters.tune._tune import TuneOptions
from tests.tree_fixtures import TINY_SHAPE, tiny_llama_for

STRING: dict[str, Any] = {"type": "string"}
NUMBER: dict[str, Any] = {"type": "number"}
TEMPLATE = Path(__file__).with_name("qwen2_5_chat_template.jinja")
#: λ rows that wander: every row sampled hot, so a random model's drafts cover many tool names.
WILD_ROWS: dict[str, Any] = {"diversity": "sample", "temperature": 1.5, "top_p": 1.0, "greedy_first": False}
#: LoRA tuning a tiny model in seconds: two epochs of 2-example batches at a high rate.
TINY_TUNING = TuneOptions(epochs=2, rank=4, lr=5e-2, batch_size=2, log_every=1)


def fn_tool(
    name: str,
    props: Mapping[str, Any] | None = None,
    required: Iterable[str] | None = None,
    description: str = "",
) -> dict[str, Any]:
    """A Chat Completions tool entry; every property is required unless ``required`` says which."""
    props = dict(props or {})
    needed = list(props) if required is None else list(required)
    parameters = {"type": "object", "properties": props, "required": needed}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def weather_tool(*, unit: bool = True, description: str = "Current weather in a city") -> dict[str, Any]:
    """``get_weather(city, unit)``, ``unit`` an enum of "c" / "f"; ``unit=False`` leaves it out."""
    props = {"city": STRING, **({"unit": {"type": "string", "enum": ["c", "f"]}} if unit else {})}
    return fn_tool("get_weather", props, description=description)


def add_tool(kind: str = "number", description: str = "Add two numbers") -> dict[str, Any]:
    """``add(a, b)`` with both operands of JSON type ``kind``. A random model writes digits until
    its token budget ends and its numbers can overflow, so the tiny-model tests use strings."""
    return fn_tool("add", {"a": {"type": kind}, "b": {"type": kind}}, description=description)


def assistant_call(name: str, args: Mapping[str, Any], cid: str) -> dict[str, Any]:
    """An assistant message making one call, its arguments as the JSON string the wire carries."""
    function = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "type": "function", "function": function}],
    }


def tool_output(cid: str, value: Any) -> dict[str, Any]:
    """The tool message answering call ``cid`` with ``value`` as JSON."""
    return tool_text(cid, json.dumps(value))


def tool_text(cid: str, text: str) -> dict[str, Any]:
    """The tool message answering call ``cid`` with plain text."""
    return {"role": "tool", "tool_call_id": cid, "content": text}


# -- tiny models -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_tokenizer() -> Any:
    """SmolLM2's real tokenizer (no weights), fresh per module: a test may add tokens to it."""
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder

    return AutoTokenizer.from_pretrained(str(embedded_hf_folder()))


def tiny_llama_fixture(seed: int, *, float64: bool = True) -> Callable[..., Any]:
    """A module fixture ``(model, tokenizer)``: a 2-layer random Llama over SmolLM2's tokenizer.
    float64 by default, so that the same maths chunked two ways (a cached and an uncached
    forward) cannot round to a different argmax."""

    @pytest.fixture(scope="module")
    def tiny(smol_tokenizer: Any) -> tuple[Any, Any]:
        model = tiny_llama_for(smol_tokenizer, seed=seed)
        return (model.double() if float64 else model), smol_tokenizer

    return tiny


def qwen_style_tokenizer() -> Any:
    """SmolLM2's tokenizer dressed as Qwen2.5's: its chat template and tool-call tokens."""
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))
    tok.add_tokens(["<tool_call>", "</tool_call>"])  # not special, as in Qwen2.5's tokenizer
    tok.chat_template = TEMPLATE.read_text(encoding="utf-8")
    return tok


def tiny_qwen(tok: Any, *, seed: int) -> Any:
    """A fresh fp32 ``Qwen2ForCausalLM`` (biased q/k/v, Qwen's architecture class) in eval mode,
    of the tiny Llama's shape; the same seed gives the same weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(vocab_size=len(tok), max_position_embeddings=4096, eos_token_id=eos, **TINY_SHAPE)
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def qwen_tokenizer() -> Any:
    return qwen_style_tokenizer()


def growing_conversation() -> list[list[dict[str, Any]]]:
    """A conversation that grows the way an agent's does, as the three prompts a drafter sees:
    each one the previous plus what came since (calls to ``weather_tool()`` and ``add_tool("string")``)."""
    ask = "What is the weather in Paris, and what is 2 plus 3?"
    convo: list[dict[str, Any]] = [{"role": "user", "content": ask}]
    out = [list(convo)]
    weather = assistant_call("get_weather", {"city": "Paris", "unit": "c"}, "1")
    convo += [weather, tool_text("1", "18 C, cloudy")]
    out.append(list(convo))
    convo += [assistant_call("add", {"a": "2", "b": "3"}, "2"), tool_text("2", "5")]
    answer = {"role": "assistant", "content": "18 C in Paris; 2 + 3 = 5."}
    convo += [answer, {"role": "user", "content": "And in Rome?"}]
    out.append(list(convo))
    return out
