"""`spectool drafters eval --drafters` specs: one word per drafter variant, options checked."""

import json

import pytest

from spectool import LocalDrafterOptions
from spectool.cli import main
from spectool.errors import ConfigError
from spectool_bench.drafters import _specs
from spectool_bench.drafters._specs import factories, parse_specs

QWEN = "local:qwen2.5-coder-0.5b,prompt=native,diversity=beam,min_confidence=0.3"


def test_a_spec_names_model_and_options_and_its_label_is_the_spec():
    specs = parse_specs(["history", *QWEN.split(","), "tuned", "min_confidence=0.5", "mined"])
    assert [s.name for s in specs] == ["history", "local", "tuned", "mined"]
    qwen = specs[1]
    assert qwen.model == "qwen2.5-coder-0.5b" and qwen.label == QWEN
    assert qwen.local_options() == LocalDrafterOptions(prompt="native", diversity="beam", min_confidence=0.3)
    assert specs[2].label == "tuned,min_confidence=0.5" and specs[0].local_options() is None


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["psychic"], "unknown drafter 'psychic'"),
        (["local", "beam_width=3"], "unknown LocalDrafterOptions field.*beam_width"),
        (["local", "diversity=greedy"], "diversity must be"),
        (["local", "max_new_tokens=1.5"], "max_new_tokens must be"),
        (["prompt=native", "local"], "comes before any drafter"),
        (["history", "prompt=native"], "'history' takes no options"),
        (["mined:qwen2.5-coder-0.5b"], "'mined' takes no model"),
        (["local:"], "no model after"),
        (["local", "prompt=native", "prompt=compact"], "given twice"),
        (["local", "=3"], "no name"),
        (["history", "history"], "given twice: history"),
        ([], "no drafter given"),
    ],
)
def test_bad_specs_are_config_errors_that_say_what(words, message):
    with pytest.raises(ConfigError, match=message):
        parse_specs(words)


def test_factories_hand_model_options_and_adapter_to_the_drafters(tmp_path):
    (tmp_path / "manifest.json").write_text('{"compact_format_version": 3}')
    made = factories(
        [*QWEN.split(","), "tuned:some.gguf", "diversity=beam", "combined", "max_calls=2"], tmp_path
    )
    local = made[QWEN]("")
    assert local._source == "qwen2.5-coder-0.5b"
    assert local.options == LocalDrafterOptions(
        prompt="native", diversity="beam", min_confidence=0.3
    ).resolved(False)
    tuned = made["tuned:some.gguf,diversity=beam"]("")
    assert tuned._source == "some.gguf" and tuned.adapter == tmp_path and tuned.options.diversity == "beam"
    assert tuned.options.max_calls == 4  # the adapter's "auto" limits still apply
    combined = made["combined,max_calls=2"]("simple_python")
    assert combined.drafters[1].options.max_calls == 2 and combined.drafters[1]._source == "embedded"
    # the command's --model is the default for specs that name none
    assert factories(["local"], None, "m.gguf")["local"]("")._source == "m.gguf"


def test_cli_rows_name_the_whole_spec_and_the_drafter_gets_its_options(tmp_path, monkeypatch):
    # A stand-in for LocalDrafter (loading a model per test is minutes on 2 cores): it takes the
    # same (model, options) and proposes nothing, so the row must show zero hits.
    seen = []

    class Silent:
        def __init__(self, model, options):
            seen.append((model, options))

        async def propose(self, request):
            return []

    monkeypatch.setitem(
        _specs.DRAFTERS, "local", lambda category="", model=None, options=None: Silent(model, options)
    )
    spec = "local:m,diversity=beam,min_confidence=0.5"
    code = main(
        ["drafters", "eval", "--categories", "simple_python", "--drafters", f"history,{spec}",
         "--samples", "1", "--limit", "2", "--no-plot", "--no-progress", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["drafter"] for r in rows] == ["history", spec]
    assert rows[1]["hits"] == 0 and rows[1]["n_calls"] > 0
    assert {s for s in seen} == {("m", LocalDrafterOptions(diversity="beam", min_confidence=0.5))}


def test_cli_refuses_a_bad_spec_before_any_work(capsys):
    assert main(["drafters", "eval", "--drafters", "local,diversity=greedy", "--limit", "1"]) == 1
    assert "diversity must be" in capsys.readouterr().err
