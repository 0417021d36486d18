"""The tuning recipe end to end on the Qwen2 family (the Qwen2.5-Coder bases), as
``test_drafters_tune`` runs it on the Llama family (SmolLM2).

The real bases are 0.5–1.5 B parameters; a seeded two-layer random **Qwen2** model (q/k/v
biases, Qwen's architecture class) over SmolLM2's tokenizer given Qwen2.5's chat template and
tool-call tokens runs the same code in seconds: LoRA on Qwen2's projection names, the adapter
saved with its manifest, merged back into a plain ``Qwen2ForCausalLM``, and a drafter that loads
it drafting grammar-valid calls in the compact format the adapter was tuned on.
"""

from __future__ import annotations

import json

import anyio
import pytest

from spectool import DraftRequest, ToolCall
from spectool._traces import TraceExample
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters._common import tool_schemas
from spectool.drafters.local._compact import COMPACT_FORMAT_VERSION
from spectool_bench.drafters._prompt_eval import valid

from .conftest import TINY_TUNING, add_tool, tiny_qwen, weather_tool

pytest.importorskip("peft")

# strings: a random model's numbers can overflow to inf (a valid JSON literal that no call may
# carry), which says nothing about the recipe
TOOLS = [weather_tool(unit=False), add_tool("string")]
REQUEST = DraftRequest([{"role": "user", "content": "weather in Paris, then add 2 and 3"}], TOOLS, 1)


def _tiny_qwen(tok):
    return tiny_qwen(tok, seed=7)


def test_tuning_recipe_end_to_end_on_the_qwen2_family(tmp_path, qwen_tokenizer) -> None:
    import torch

    from spectool.drafters.local._adapter import load_adapter
    from spectool.drafters.local._compact import compact_prompt_ids
    from spectool.drafters.tune._tune import save_adapter, tune

    tok = qwen_tokenizer
    examples = [
        TraceExample(REQUEST, [ToolCall("get_weather", {"city": "Paris"})]),
        TraceExample(REQUEST, [ToolCall("add", {"a": "2", "b": "3"})]),
        TraceExample(REQUEST, [ToolCall("get_weather", {"city": "Rome"})]),
    ]
    model = _tiny_qwen(tok)
    assert model.model.layers[0].self_attn.q_proj.bias is not None  # Qwen2's biased projections
    peft_model, report = tune(
        model,
        tok,
        examples,
        TINY_TUNING,
        out=open(tmp_path / "log", "w"),
    )
    assert report["steps"] == 4 and report["examples"] == 3
    assert all(torch.isfinite(torch.tensor(p["loss"])) for p in report["loss_curve"])
    tuned_names = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):  # LoRA found Qwen2's attention layers
        assert any(f"{proj}.lora_A" in n for n in tuned_names), proj
    folder = save_adapter(
        peft_model, tmp_path / "adapter", {"compact_format_version": COMPACT_FORMAT_VERSION}
    )
    assert (
        json.loads((folder / "manifest.json").read_text())["compact_format_version"] == COMPACT_FORMAT_VERSION
    )

    ids = torch.tensor([compact_prompt_ids(tok, REQUEST)])
    with torch.no_grad():
        base = _tiny_qwen(tok)(ids).logits
        merged = load_adapter(_tiny_qwen(tok), folder)
        tuned = merged(ids).logits
    assert type(merged).__name__ == "Qwen2ForCausalLM"  # merged: a plain model, no peft wrapper
    assert (tuned - base).abs().max() > 1e-3  # the negative control is the untouched base

    pytest.importorskip("xgrammar")
    # a four-step adapter on a random model writes nonsense: short strings keep every row a
    # complete call within the token budget, the grammar keeps it valid
    options = LocalDrafterOptions(max_string_length=8, max_new_tokens=80)
    drafter = LocalDrafter((_tiny_qwen(tok), tok), options, adapter=folder)
    assert drafter.compact_options["version"] == COMPACT_FORMAT_VERSION
    calls = anyio.run(drafter.propose, REQUEST)
    assert calls and all(valid(c, tool_schemas(TOOLS)) for c in calls)
