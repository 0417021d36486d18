"""Tuning a drafter on traces: the compact format, traces, the BFCL builder, LoRA recipe, adapters."""

import json
from pathlib import Path

import anyio
import pytest

from spectool import ConfigError, Speculator, ToolCall
from spectool._traces import TRACE_VERSION, TraceExample, TraceRecorder, load_traces
from spectool._types import DraftRequest
from spectool.drafters.local._compact import (
    COMPACT_FORMAT_VERSIONS,
    compact_messages,
    compact_prompt_ids,
    compact_target,
    compact_tools,
    described_default,
)
from spectool.testing import KeyValueWorld, call
from tests.tree_fixtures import tiny_llama_for

from .conftest import TINY_TUNING, fn_tool

ROOT = Path(__file__).resolve().parents[2]


def _fn(name, desc, props, required=()):
    return fn_tool(name, props, required, desc)


TOOLS = [
    _fn(
        "get_weather",
        "Current weather in a city. Long tail.",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
        ["city"],
    ),
    _fn("add", "Add two numbers", {"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
]
REQUEST = DraftRequest(
    messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris, then add 2 and 3"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny " * 100},
    ],
    tools=TOOLS,
)
CALLS = [ToolCall("add", {"b": 3, "a": 2})]


# -- the compact format -------------------------------------------------------------------------


def test_compact_prompt_lists_signatures_recent_calls_and_short_results() -> None:
    system, user = compact_messages(REQUEST)
    assert 'get_weather(city: string, unit?: "c"|"f"="c") - Current weather in a city' in system["content"]
    assert "add(a: number, b: number) - Add two numbers" in system["content"]
    assert user["content"].splitlines()[0] == "User: weather in Paris, then add 2 and 3"
    assert 'Call: {"name": "get_weather", "arguments": {"city": "Paris"}}' in user["content"]
    result = next(line for line in user["content"].splitlines() if line.startswith("Result: "))
    assert len(result) < 200 and result.endswith("…")  # long tool output is cut


def test_many_tools_are_ranked_by_overlap_with_the_last_user_message() -> None:
    noise = [_fn(f"tool_{i}", "does something unrelated", {}) for i in range(40)]
    req = DraftRequest(
        messages=[{"role": "user", "content": "what is the weather in Oslo"}], tools=noise + TOOLS
    )
    shown = [b["name"] for b in compact_tools(req, max_tools=5)]
    assert "get_weather" in shown and len(shown) == 5
    system = compact_messages(req, max_tools=5, described=1)[0]["content"]
    assert system.count(" - ") == 1  # only the best-ranked tool keeps its description


def test_system_message_is_the_same_for_every_step_of_a_turn() -> None:
    # the prefix KV cache can only cover the system message if later steps render it alike
    noise = [_fn(f"tool_{i}", "does something unrelated", {}) for i in range(40)]
    user = {"role": "user", "content": "what is the weather in Oslo"}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "tool_7", "arguments": "{}"}}],
    }
    first = DraftRequest(messages=[user], tools=noise + TOOLS)
    later = DraftRequest(
        messages=[user, call, {"role": "tool", "tool_call_id": "c1", "content": "ok"}], tools=noise + TOOLS
    )
    assert compact_messages(first, max_tools=5)[0] == compact_messages(later, max_tools=5)[0]


@pytest.mark.parametrize(
    ("description", "said"),
    [
        ("Unit of length. Default is 'cm'.", "'cm'"),
        ("Initial speed in m/s, defaults to 0.", "0"),
        ("Round the result (default: True)", "True"),
        ("Gravity. Default value is 9.81 m/s^2, earth's gravity.", "9.81"),
        ("Will default to that of water.", None),  # prose, not a value
        ("The city to look up.", None),
    ],
)
def test_described_defaults_are_read_from_the_argument_description(description, said) -> None:
    assert described_default({"type": "string", "description": description}) == said


def test_format_3_shows_described_defaults_and_format_2_renders_as_before() -> None:
    tool = _fn(
        "area",
        "Area of a shape",
        {
            "side": {"type": "number"},
            "unit": {"type": "string", "description": "Unit. Default is 'cm'."},
            "round": {"type": "boolean", "default": False, "description": "Default is True."},
        },
        ["side"],
    )
    req = DraftRequest(messages=[{"role": "user", "content": "area of a 3 cm square"}], tools=[tool])
    v2 = compact_messages(req, version=2)[0]["content"]
    v3 = compact_messages(req, version=3)[0]["content"]
    # the schema's own default wins over prose; the described one is marked apart (~)
    assert "area(side: number, unit?: string, round?: boolean=false)" in v2
    assert "area(side: number, unit?: string~'cm', round?: boolean=false)" in v3
    assert compact_messages(req)[0]["content"] == v3  # the current version is the default
    with pytest.raises(ConfigError, match="compact format version 9"):
        compact_messages(req, version=9)


def test_a_drafter_renders_in_the_format_its_adapter_was_tuned_on(tmp_path) -> None:
    from spectool.drafters import LocalDrafter
    from spectool.drafters.local._adapter import shipped_adapter_path

    shipped = LocalDrafter(model="embedded", adapter=shipped_adapter_path())
    assert shipped.compact_options["version"] in COMPACT_FORMAT_VERSIONS
    for version in COMPACT_FORMAT_VERSIONS:
        (tmp_path / f"v{version}").mkdir()
        (tmp_path / f"v{version}" / "manifest.json").write_text(
            json.dumps({"compact_format_version": version})
        )
        assert (
            LocalDrafter(model="embedded", adapter=tmp_path / f"v{version}").compact_options["version"]
            == version
        )
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "manifest.json").write_text(json.dumps({"compact_format_version": 1}))
    with pytest.raises(ConfigError, match="retune"):
        LocalDrafter(model="embedded", adapter=tmp_path / "v1")


def test_target_is_what_the_grammar_lets_the_drafter_write(smol_tokenizer) -> None:
    pytest.importorskip("xgrammar")
    import xgrammar as xgr

    from spectool.drafters.local._grammar import GrammarConstraint

    text = compact_target(CALLS, TOOLS)
    assert text == '[{"name": "add", "arguments": {"a": 2, "b": 3}}]'  # schema order, not call order
    grammar = GrammarConstraint(smol_tokenizer, len(smol_tokenizer), max_calls=3)
    matcher = xgr.GrammarMatcher(grammar.compiled(TOOLS))
    ids = smol_tokenizer(text + smol_tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    assert all(matcher.accept_token(i) for i in ids) and matcher.is_terminated()


def test_training_and_drafting_render_the_same_prompt_and_mask_it(smol_tokenizer) -> None:
    from spectool.drafters.local._loading import LocalModel
    from spectool.drafters.tune._tune import IGNORE, encode_example
    from spectool_bench.drafters._adapter_eval import CompactDrafter

    enc = encode_example(smol_tokenizer, TraceExample(REQUEST, CALLS))
    drafting = CompactDrafter((None, smol_tokenizer)).prompt_ids(
        LocalModel(None, smol_tokenizer, "t"), REQUEST
    )
    prompt = compact_prompt_ids(smol_tokenizer, REQUEST)
    assert drafting.tolist()[0] == prompt == enc.input_ids[: len(prompt)]
    assert enc.labels[: len(prompt)] == [IGNORE] * len(prompt)
    target = enc.input_ids[len(prompt) :]
    assert enc.labels[len(prompt) :] == target and IGNORE not in target
    assert smol_tokenizer.decode(target) == compact_target(CALLS, TOOLS) + smol_tokenizer.eos_token
    assert 100 < len(enc.input_ids) < 400


# -- traces ----------------------------------------------------------------------------------------


def test_trace_round_trip_and_clear_errors(tmp_path) -> None:
    rec = TraceRecorder(tmp_path / "t.jsonl", mode="w")
    rec.record(REQUEST, CALLS, task="x")
    rec.record(REQUEST, [])  # nothing was called: nothing to learn
    back = load_traces(tmp_path / "t.jsonl")
    assert len(back) == 1 and rec.written == 1
    assert back[0].calls == CALLS and list(back[0].request.messages) == list(REQUEST.messages)
    assert back[0].meta == {"task": "x"} and list(back[0].request.tools) == TOOLS
    (tmp_path / "new.jsonl").write_text(
        json.dumps({"v": TRACE_VERSION + 1, "messages": [], "tools": [], "calls": []}) + "\n"
    )
    with pytest.raises(ConfigError, match="newer"):
        load_traces(tmp_path / "new.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"v": 1, "messages": []}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        load_traces(tmp_path / "bad.jsonl")


@pytest.mark.anyio
async def test_speculator_records_each_request_and_the_calls_that_followed(tmp_path) -> None:
    world = KeyValueWorld()
    rec = TraceRecorder(tmp_path / "t.jsonl")
    messages = [{"role": "user", "content": "read a"}]
    async with Speculator(world.toolbox, None, trace=rec) as spec:
        spec.start_turn(messages)
        outcomes = await spec.resolve_all([call("get", key="a")])
    assert outcomes[0].value == "1"
    (ex,) = load_traces(tmp_path / "t.jsonl")
    assert ex.calls == [ToolCall("get", {"key": "a"})] and list(ex.request.messages) == messages
    assert {t["function"]["name"] for t in ex.request.tools} >= {"get", "put"}


def test_bfcl_builder_replays_ground_truth_with_true_outputs() -> None:
    from spectool_bench.bfcl._splits import split_of_id
    from spectool_bench.bfcl._tasks import load_tasks
    from spectool_bench.workloads._traces import bfcl_examples, task_examples

    task = next(t for t in load_tasks("multi_turn_base", limit=10) if t.calls >= 3)
    examples = list(task_examples(task))
    assert len(examples) == task.calls  # one example per ground-truth call
    truth = [c for turn in task.ground_truth for c in turn]
    assert [ex.calls for ex in examples] == [[c] for c in truth]
    later = examples[-1].request.messages
    assert sum(1 for m in later if m.get("role") == "tool") == len(truth) - 1
    assert all(not str(m["content"]).startswith("Error") for m in later if m.get("role") == "tool")
    single = list(bfcl_examples(["parallel"], "train", limit=3))
    assert {split_of_id(ex.meta["task"]) for ex in single} == {"train"}
    first = [ex for ex in single if ex.meta["step"] == 0]
    assert all(len(ex.calls) >= 1 for ex in first)  # step 0 targets all of the task's calls


# -- the recipe end to end -------------------------------------------------------------------------


def _tiny_llama(tokenizer):
    """A seeded 2-layer random Llama with ``tokenizer``'s vocabulary: the real code paths in ms."""
    return tiny_llama_for(tokenizer, seed=0)


def test_tuning_recipe_end_to_end_and_adapter_changes_outputs(tmp_path, smol_tokenizer) -> None:
    """A tiny random Llama with SmolLM2's tokenizer: the real recipe in seconds."""
    import torch

    from spectool.drafters.local._adapter import adapter_manifest, load_adapter
    from spectool.drafters.tune._tune import save_adapter, tune

    def tiny():
        return _tiny_llama(smol_tokenizer)

    examples = [
        TraceExample(REQUEST, CALLS),
        TraceExample(REQUEST, [ToolCall("add", {"a": 1, "b": 1})]),
        TraceExample(REQUEST, [ToolCall("get_weather", {"city": "Rome"})]),
    ]
    peft_model, report = tune(
        tiny(),
        smol_tokenizer,
        examples,
        TINY_TUNING,
        out=open(tmp_path / "log", "w"),
    )
    assert report["steps"] == 4 and report["examples"] == 3 and len(report["loss_curve"]) == 4
    assert all(torch.isfinite(torch.tensor(p["loss"])) for p in report["loss_curve"])
    folder = save_adapter(peft_model, tmp_path / "adapter", {"data": "3 examples"})
    assert (folder / "adapter_model.safetensors").is_file() and adapter_manifest(folder)[
        "data"
    ] == "3 examples"

    ids = torch.tensor([compact_prompt_ids(smol_tokenizer, REQUEST)])
    with torch.no_grad():
        base = tiny()(ids).logits
        tuned_model = load_adapter(tiny(), folder)
        tuned = tuned_model(ids).logits
    assert type(tuned_model).__name__ == "LlamaForCausalLM"  # merged: a plain model, no peft wrapper
    assert (tuned - base).abs().max() > 1e-3
    with pytest.raises(ConfigError, match="not a peft adapter"):
        load_adapter(tiny(), tmp_path)


def test_the_manifest_lists_the_content_digest_of_every_example_trained_on(tmp_path) -> None:
    from spectool.drafters.tune._tune import training_examples

    traces = tmp_path / "t.jsonl"
    examples = [
        TraceExample(REQUEST, CALLS, {"category": "a", "split": "train", "content": "d2"}),
        TraceExample(REQUEST, CALLS, {"category": "a", "split": "train", "content": "d1"}),
        TraceExample(REQUEST, CALLS, {"category": "b", "split": "train", "content": "d2"}),
        TraceExample(REQUEST, CALLS, {"category": "b"}),  # recorded by an agent: no digest
    ]
    traces.write_text("".join(json.dumps(ex.as_json()) + "\n" for ex in examples))
    chosen, data = training_examples(str(traces))
    assert data["content_hashes"] == ["d1", "d2"]
    assert data["examples_by_category"] == {"a": 2, "b": 2} and data["splits"] == ["?", "train"]
    # a subset trains on a subset: only the chosen examples' digests are listed
    chosen, data = training_examples(str(traces), max_per_category=1, seed=0)
    picked = [ex.meta.get("content") for ex in chosen]
    assert data["content_hashes"] == sorted({c for c in picked if c})


def test_loss_on_the_target_columns_equals_the_full_right_padded_loss(smol_tokenizer) -> None:
    """Left padding plus the output layer on the target columns only must train on exactly the
    loss the model's own right-padded forward computes (rows of different lengths, so a wrong
    position count or a shifted label column changes it)."""
    import torch

    from spectool.drafters.tune._tune import IGNORE, _target_loss, encode_example

    model = _tiny_llama(smol_tokenizer)
    short = DraftRequest([{"role": "user", "content": "add 2 and 3"}], TOOLS)
    batch = [
        encode_example(smol_tokenizer, TraceExample(REQUEST, CALLS)),
        encode_example(smol_tokenizer, TraceExample(short, [ToolCall("get_weather", {"city": "Rome"})])),
    ]
    assert len(batch[0].input_ids) != len(batch[1].input_ids)
    width = max(len(e.input_ids) for e in batch)
    ids = torch.zeros((2, width), dtype=torch.long)
    labels = torch.full((2, width), IGNORE)
    mask = torch.zeros((2, width), dtype=torch.long)
    for row, e in enumerate(batch):
        n = len(e.input_ids)
        ids[row, :n], labels[row, :n], mask[row, :n] = torch.tensor(e.input_ids), torch.tensor(e.labels), 1
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        ours = _target_loss(model, batch, pad_id=0)
    assert torch.allclose(full, ours, atol=1e-5), (full, ours)


def test_a_tokenizer_without_a_chat_template_gets_the_plain_one() -> None:
    """Gemma 3 270M ships as a base model with no chat template: the prompt falls back to
    ``Role:`` blocks after the BOS token, the answer left open."""
    from spectool.drafters.local._compact import compact_prompt_text

    class Plain:  # the one attribute pair compact_prompt_text reads from a template-less tokenizer
        chat_template = None
        bos_token = "<bos>"

    text = compact_prompt_text(Plain(), REQUEST)
    system, user = compact_messages(REQUEST)
    assert text == f"<bos>System:\n{system['content']}\n\nUser:\n{user['content']}\n\nAssistant:\n"


# -- the shipped adapter ---------------------------------------------------------------------------


def test_shipped_adapter_has_its_manifest_and_documented_command() -> None:
    from spectool.drafters.local._adapter import adapter_manifest, shipped_adapter_path

    path = shipped_adapter_path()
    manifest = adapter_manifest(path)
    assert {"simple_python", "multi_turn_base"} <= set(manifest["data"]["examples_by_category"])
    assert sum(f.stat().st_size for f in path.iterdir()) < 15 * 2**20
    script = (ROOT / "scripts" / "build-adapter.sh").read_text()
    assert "--split train" in script and "-m spectool.drafters.tune " in script
    assert "scripts/build-adapter.sh" in (ROOT / "docs" / "drafters.md").read_text()


def test_shipped_adapter_traces_share_no_content_with_any_test_task(tmp_path) -> None:
    """The leakage guard reads the shipped traces, not the manifest's claims: the file is the one
    tuning read (its digest), every content hash the manifest lists is recomputed from it, and no
    request in it has a content twin among the test-split tasks of any BFCL category."""
    import gzip
    import hashlib

    from spectool.drafters.local._adapter import adapter_manifest, shipped_adapter_path
    from spectool_bench.bfcl._splits import content_digest, in_split
    from spectool_bench.bfcl._tasks import ALL_CATEGORIES, load_tasks
    from spectool_bench.bfcl._twins import trace_twins

    path = shipped_adapter_path()
    data = adapter_manifest(path)["data"]
    raw = gzip.decompress((path / "traces.jsonl.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest()[:16] == data["sha256_16"]
    (tmp_path / "traces.jsonl").write_bytes(raw)
    traces = load_traces(tmp_path / "traces.jsonl")
    recomputed = {content_digest(ex.request.messages, ex.request.tools) for ex in traces}
    claimed = set(data["content_hashes"])
    assert claimed and claimed <= recomputed
    tests = [t for c in ALL_CATEGORIES for t in in_split(load_tasks(c), "test")]
    assert trace_twins(tests, traces) == []


def test_tune_cli_parses_its_options() -> None:
    import argparse

    from spectool.drafters.tune import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--traces",
            "t.jsonl",
            "--out",
            "d",
            "--epochs",
            "2",
            "--rank",
            "8",
            "--lr",
            "1e-4",
            "--max-examples",
            "5",
            "--threads",
            "1",
        ]
    )
    assert (args.epochs, args.rank, args.lr, args.max_examples, args.threads) == (2.0, 8, 1e-4, 5, 1)


def test_precision_auto_follows_what_the_cpu_computes_natively(monkeypatch) -> None:
    """bf16 only where oneDNN has it natively: an AVX2-only CPU runs a bf16 step ~20x slower."""
    import torch

    from spectool.drafters.tune import resolve_precision

    assert resolve_precision("fp32") == "fp32" and resolve_precision("bf16") == "bf16"
    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda native=native: native)
        assert resolve_precision("auto") == expected


def test_traces_run_off_the_event_loop_thread_safely(tmp_path) -> None:
    rec = TraceRecorder(tmp_path / "t.jsonl")

    async def many() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(
                    anyio.to_thread.run_sync, rec.record, REQUEST, [ToolCall("add", {"a": i, "b": 0})]
                )

    anyio.run(many)
    assert sorted(ex.calls[0].arguments["a"] for ex in load_traces(tmp_path / "t.jsonl")) == list(range(20))


def test_a_tuned_drafter_drafts_without_importing_the_tuning_code(tmp_path, smol_tokenizer) -> None:
    """Tuning stays available (spectool drafters tune) but is not what a drafter loads. A tiny
    random base saved as an HF folder, with an adapter tuned on it here, stands in for the
    embedded model and the shipped adapter: which modules load does not depend on their size."""
    import subprocess
    import sys

    from spectool.drafters.tune._tune import save_adapter, tune

    base = tmp_path / "base"
    _tiny_llama(smol_tokenizer).save_pretrained(base)
    smol_tokenizer.save_pretrained(base)
    examples = [TraceExample(REQUEST, CALLS)]
    peft_model, _ = tune(
        _tiny_llama(smol_tokenizer), smol_tokenizer, examples, TINY_TUNING, out=open(tmp_path / "log", "w")
    )
    adapter = save_adapter(peft_model, tmp_path / "adapter", {"data": "1 example"})
    code = (
        "import sys, json, anyio\n"
        "from spectool import DraftRequest\n"
        "from spectool.drafters import LocalDrafter, LocalDrafterOptions\n"
        "tools = [{'type': 'function', 'function': {'name': 'add', 'parameters': {'type': 'object',"
        " 'properties': {'a': {'type': 'string'}}, 'required': ['a']}}}]\n"
        "options = LocalDrafterOptions(max_new_tokens=24)\n"
        "d = LocalDrafter(sys.argv[1], options, adapter=sys.argv[2])\n"
        "calls = anyio.run(d.propose, DraftRequest([{'role': 'user', 'content': 'add 2'}], tools, 1))\n"
        "tuning = ('drafters.tune', 'drafters.tune._tune', 'drafters.tune._tune_data')\n"
        "late = lambda: sorted(m for m in sys.modules if m.endswith(tuning) or m.split('.')[0] == 'trl')\n"
        "drafted = late()\n"
        "import spectool.drafters.tune._tune\n"  # the control: the check sees a tuning import
        "print(json.dumps([len(d.last_texts), drafted, late()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(base), str(adapter)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows, drafted, control = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows == 1 and drafted == []
    assert control == [
        "spectool.drafters.tune",
        "spectool.drafters.tune._tune",
        "spectool.drafters.tune._tune_data",
    ]


def test_the_tune_command_trains_with_its_flags_and_writes_them_down(tmp_path, smol_tokenizer) -> None:
    """`spectool drafters tune` end to end on a tiny saved base: the flags reach the training
    (steps = epochs × batches) and the manifest, the training defaults are TuneOptions'."""
    from spectool.drafters.local._adapter import adapter_manifest
    from spectool.drafters.tune import main
    from spectool.drafters.tune._tune import TuneOptions

    base = tmp_path / "base"
    _tiny_llama(smol_tokenizer).save_pretrained(base)
    smol_tokenizer.save_pretrained(base)
    rec = TraceRecorder(tmp_path / "t.jsonl", mode="w")
    for a in range(4):
        rec.record(REQUEST, [ToolCall("add", {"a": a, "b": 3})], category="c")
    out = tmp_path / "adapter"
    flags = ["--traces", str(tmp_path / "t.jsonl"), "--out", str(out), "--model", str(base)]
    flags += ["--epochs", "2", "--rank", "4", "--lr", "5e-2", "--batch-size", "2", "--precision", "fp32"]
    assert main(flags) == 0
    manifest = adapter_manifest(out)
    assert manifest["steps"] == 4 and manifest["examples"] == 4  # 2 epochs of 2 batches of 2
    options = manifest["options"]
    assert (options["epochs"], options["rank"], options["batch_size"]) == (2.0, 4, 2)
    assert (options["max_tokens"], options["seed"]) == (TuneOptions.max_tokens, TuneOptions.seed) == (768, 0)
