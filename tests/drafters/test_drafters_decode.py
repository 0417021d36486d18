"""The local drafter's fast decode loop on a tiny random Llama with SmolLM2's real tokenizer.

A random 3-layer model is enough to check the machinery (it writes nonsense, but the grammar
keeps it well-formed): the prefix cache and λ rows give exactly what decoding without the cache
gives, jump-forward feeds schema-forced tokens without sampling, a set stop flag ends a draft
between forwards and leaves a cache the next draft can trust. The model runs in float64 so the
cached and uncached forwards (different chunking of the same maths) cannot round to a
different argmax.
"""

from __future__ import annotations

import sys
import threading
import types

import anyio
import pytest
import torch

from spectool import ConfigError, DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters._common import tool_schemas
from spectool.drafters.local._copy import open_string_value
from spectool.drafters.local._decode import DecodeInputs, DecodeStats, PrefixCache, decode_rows
from spectool.drafters.local._grammar import GrammarConstraint
from spectool.drafters.local._options import TUNED_LIMITS, UNTUNED_LIMITS
from spectool.drafters.local._row_limits import repeats_a_call
from spectool.toolcall_text import parse_tool_calls
from spectool_bench.drafters._prompt_eval import valid

from .conftest import add_tool, growing_conversation, tiny_llama_fixture, weather_tool

# strings, not integers: the grammar bounds a string's length but not an integer's digits,
# and a random model happily writes digits until max_new_tokens
TOOLS = [weather_tool(), add_tool("string")]
_turns = growing_conversation


tiny = tiny_llama_fixture(seed=7)


@pytest.fixture(scope="module")
def grammar(tiny):
    model, tok = tiny
    return GrammarConstraint(
        tok, model.get_output_embeddings().weight.shape[0], max_string_length=12, max_calls=1
    )


def _decode(
    tiny,
    grammar,
    ids,
    prefix,
    *,
    rows=1,
    reuse=True,
    jump=True,
    stop=None,
    stats=None,
    seed=0,
    free=False,
    **options,
):
    model, tok = tiny
    inputs = DecodeInputs(
        *(model, tok, grammar.compiled(TOOLS), grammar.xgr, ids, prefix, stop or threading.Event()),
        max_new_tokens=options.pop("max_new_tokens", 48),
        stop_ids=grammar.stop_token_ids,
        vocab=grammar.vocab_size,
        jump_forward=jump,
        reuse=reuse,
        stats=stats,
        max_string_length=options.pop("max_string_length", None),
    )
    return decode_rows(
        inputs, rows=rows, temperature=options.pop("temperature", 1.0), top_p=0.95, seed=seed, **options
    )


def _prompts(tiny):
    drafter = LocalDrafter(tiny)
    return [drafter.token_ids(drafter._loaded, DraftRequest(m, TOOLS, 1)) for m in _turns()]


def test_prefix_cache_and_lambda_rows_draft_exactly_what_fresh_decoding_drafts(tiny, grammar):
    cached, fresh = PrefixCache(), PrefixCache()
    reused = []
    for ids in _prompts(tiny):
        stats = DecodeStats()
        with torch.inference_mode():
            got = _decode(tiny, grammar, ids, cached, rows=3, stats=stats)
            want = _decode(tiny, grammar, ids, fresh, rows=3, reuse=False)
        assert got == want and len(got) == 3  # greedy row 0 and the seeded sampled rows alike
        reused.append(stats.reused_tokens)
        assert cached.ids == list(ids)  # rows were rewound: the cache holds the prompt only
    assert reused[0] == 0 and reused[1] > 0.5 * len(_prompts(tiny)[0])  # the second turn re-used the first


def test_branch_rows_fork_the_greedy_row_and_the_model_sees_only_each_rows_own_prefix(tiny, grammar):
    _, tok = tiny
    ids = _prompts(tiny)[0]
    cache = PrefixCache()
    with torch.inference_mode():
        greedy = _decode(tiny, grammar, ids, PrefixCache(), rows=1, temperature=0.0)
        rows = _decode(tiny, grammar, ids, cache, rows=3, branch=True)
        assert cache.ids == list(ids)  # forks cropped back: the cache holds the prompt only
        assert rows[0] == greedy[0] and len(rows) == 3 and len({tuple(r) for r in rows}) == 3
        schemas = tool_schemas(TOOLS)
        for row in rows[1:]:
            at = next(i for i, (a, b) in enumerate(zip(row, rows[0])) if a != b)  # the fork
            calls = parse_tool_calls(tok.decode(row, skip_special_tokens=True))
            assert len(calls) == 1 and valid(calls[0], schemas)
            assert row[:at] == rows[0][:at]
        # the cache crops are what a fork can get wrong: every forward must see a prefix of the
        # prompt + one of the rows (the tiny model barely depends on context, so compare tokens
        # in the cache, not what it predicts)
        spy = _CacheShadow(tiny[0])
        forked = _decode((spy, tok), grammar, ids, PrefixCache(), rows=3, branch=True)
        assert forked == rows
        full = [list(ids) + r for r in rows]
        assert all(any(seen == f[: len(seen)] for f in full) for seen in spy.seen)
        assert len(spy.seen) > len(rows)


class _CacheShadow:
    """Wraps the model and tracks, per forward, the token ids its KV cache then holds."""

    def __init__(self, model) -> None:
        self.model, self.config = model, model.config
        self.ids: list[int] = []
        self.seen: list[list[int]] = []

    def __call__(self, **kwargs):
        held = kwargs["past_key_values"].get_seq_length()
        self.ids = self.ids[:held] + kwargs["input_ids"][0].tolist()
        self.seen.append(list(self.ids))
        return self.model(**kwargs)


def test_a_row_ends_when_it_writes_a_call_it_already_wrote(tiny):
    _, tok = tiny
    a, b = '{"name": "add", "arguments": {"a": 1}}', '{"name": "add", "arguments": {"a": 2}}'

    def ends(text: str, last: str) -> bool:
        return repeats_a_call(tok, tok(text)["input_ids"], tok(last)["input_ids"])

    assert ends(f"[{a}, {b}, {a}", "}}")
    assert ends(f"[{a}, {a},", "}},")  # a merged closing token
    assert not ends(f"[{a}, {b}", "}}")  # distinct calls
    assert not ends(f"[{a}", "}}")  # one call
    assert not ends(f'[{a}, {{"name": "add", "arguments": {{"a": 1}}', "}")  # mid-call
    assert not ends(f"[{a}, {b}, {a}", "1")  # nothing closed in this step
    # jump-forward feeds the next call's opening with the closing brace
    assert ends(f'[{a}, {b}, {a}, {{"name": "add", "arguments": {{"a":', '}, {"name": "add"')
    assert not ends(f'[{a}, {b}, {{"name": "add", "arguments": {{"a":', '}, {"name": "add"')


def test_rows_are_complete_valid_calls_and_jump_forward_skips_sampling(tiny, grammar):
    _, tok = tiny
    ids = _prompts(tiny)[0]
    jump, plain = DecodeStats(), DecodeStats()
    with torch.inference_mode():
        rows = _decode(tiny, grammar, ids, PrefixCache(), rows=2, stats=jump)
        _decode(tiny, grammar, ids, PrefixCache(), rows=2, jump=False, stats=plain)
    schemas = tool_schemas(TOOLS)
    for row in rows:
        calls = parse_tool_calls(tok.decode(row, skip_special_tokens=True))
        assert len(calls) == 1 and valid(calls[0], schemas)
    assert jump.forced_tokens > 0 and plain.forced_tokens == 0
    assert jump.forwards < plain.forwards  # forced tokens rode along in one forward each
    assert jump.sampled_tokens < plain.sampled_tokens


def test_the_decode_loop_bounds_strings_an_unbounded_grammar_leaves_open(tiny):
    # The untuned default: the grammar compiles without maxLength (ms, not ~0.2 s) and the loop
    # closes a string value once it is full. A random model writes strings until it is stopped,
    # so without the bound its values run far past it.
    model, tok = tiny
    free = GrammarConstraint(
        tok, model.get_output_embeddings().weight.shape[0], max_string_length=None, max_calls=1
    )
    ids = _prompts(tiny)[0]
    longest_token = 16  # the last token may carry a value a little past the bound

    def values(**options) -> list[str]:
        with torch.inference_mode():
            rows = _decode(
                tiny, free, ids, PrefixCache(), rows=2, temperature=0.0, max_new_tokens=96, **options
            )
        out = []
        for row in rows:
            for call in parse_tool_calls(tok.decode(row, skip_special_tokens=True)):
                out += [v for v in call.arguments.values() if isinstance(v, str)]
        return out

    bounded = values(max_string_length=8)
    assert bounded and all(len(v) <= 8 + longest_token for v in bounded)
    assert max(len(v) for v in bounded) >= 8  # it was reached, then closed: the calls still parse
    # the same greedy row, unguarded: a value runs on (still open when the tokens ran out)
    (row,) = _decode(tiny, free, ids, PrefixCache(), rows=1, temperature=0.0, max_new_tokens=96)
    text = tok.decode(row, skip_special_tokens=True)
    assert len(open_string_value(text) or "") > 8 + longest_token


class _StopAfter:
    """Wraps the model: sets the stop flag after ``n`` forwards (a cancellation mid-draft)."""

    def __init__(self, model, stop: threading.Event, n: int) -> None:
        self.model, self.stop, self.n, self.calls = model, stop, n, 0
        self.config = model.config

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls >= self.n:
            self.stop.set()
        return self.model(**kwargs)


@pytest.mark.parametrize("after", [1, 3])
def test_a_set_stop_flag_ends_the_draft_at_the_next_forward_and_the_cache_stays_sound(tiny, grammar, after):
    model, tok = tiny
    ids = _prompts(tiny)[2]
    prefix, stop = PrefixCache(), threading.Event()
    wrapped = _StopAfter(model, stop, after)
    with torch.inference_mode():
        got = decode_rows(
            DecodeInputs(
                *(wrapped, tok, grammar.compiled(TOOLS), grammar.xgr, ids, prefix, stop),
                max_new_tokens=48,
                stop_ids=grammar.stop_token_ids,
                vocab=grammar.vocab_size,
            ),
            rows=3,
        )
        assert got == [] and wrapped.calls == after  # no forward after the flag was set
        # the cache is sound: what it keeps is a prefix of the prompt, and its KV (if any)
        # covers exactly those ids
        assert prefix.ids == list(ids[: len(prefix.ids)])
        assert prefix.cache is None or prefix.cache.get_seq_length() == len(prefix.ids)
        again = _decode(tiny, grammar, ids, prefix)
        fresh = _decode(tiny, grammar, ids, PrefixCache(), reuse=False)
    assert again == fresh


@pytest.mark.anyio
async def test_local_drafter_fast_path_with_a_given_model(tiny):
    drafter = LocalDrafter(tiny, LocalDrafterOptions(max_string_length=12))
    schemas = tool_schemas(TOOLS)
    for messages in _turns():
        calls = await drafter.propose(DraftRequest(messages, TOOLS, samples=2))
        assert 1 <= len(calls) <= 2 and all(valid(c, schemas) for c in calls)
        assert len(drafter.last_texts) == 2
    assert drafter.last_stats is not None and drafter.last_stats.reused_tokens > 0


@pytest.mark.anyio
async def test_cancelled_draft_stops_its_worker_promptly(tiny, monkeypatch):
    """The caller's cancellation sets the stop flag; the worker thread gives the lock back soon."""
    model, tok = tiny
    slow_calls = []

    class Slow:
        config = model.config

        def __call__(self, **kw):
            slow_calls.append(1)
            anyio.from_thread  # noqa: B018 - documents that this runs in the worker thread
            threading.Event().wait(0.05)
            return model(**kw)

        def get_output_embeddings(self):
            return model.get_output_embeddings()

        generation_config = model.generation_config

    drafter = LocalDrafter((Slow(), tok), LocalDrafterOptions(max_string_length=12, max_new_tokens=48))
    with anyio.move_on_after(0.12):
        await drafter.propose(DraftRequest(_turns()[2], TOOLS, samples=3))
    seen = len(slow_calls)
    freed = threading.Event()

    def wait_lock():
        with drafter._loaded.lock:
            freed.set()

    await anyio.to_thread.run_sync(wait_lock)
    assert freed.is_set() and len(slow_calls) <= seen + 1  # at most the forward already under way


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="prompt"):
        LocalDrafterOptions(prompt="examples")  # the old xLAM prompt left the runtime
    with pytest.raises(ConfigError, match="diversity"):
        LocalDrafterOptions(diversity="generate")
    with pytest.raises(ConfigError, match="max_calls"):
        LocalDrafterOptions(max_calls=0)
    with pytest.raises(ConfigError, match="max_string_length"):
        LocalDrafterOptions(max_string_length=0)
    with pytest.raises(ConfigError, match="min_confidence"):
        LocalDrafterOptions(min_confidence=1.5)
    with pytest.raises(ConfigError, match="needs constrained"):
        LocalDrafterOptions(diversity="beam", constrained=False)
    with pytest.raises(ConfigError, match="LocalDrafterOptions"):
        LocalDrafter(None, {"max_calls": 2})  # a dict is not an options object
    # the old keyword form: honoured with a warning, the removed variants refused by name
    with pytest.warns(DeprecationWarning, match="LocalDrafterOptions"):
        assert LocalDrafter(
            None, max_calls=2, compact_options={"described": 0}
        ).options == LocalDrafterOptions(max_calls=2, described=0).resolved(tuned=False)
    for old in ({"prompt": "examples"}, {"decoder": "generate"}, {"examples": ()}):
        with pytest.raises(ConfigError, match="left spectool"):
            LocalDrafter(None, **old)
    with pytest.raises(ConfigError, match="unknown LocalDrafter option"):
        LocalDrafter(None, beam_width=3)
    # several problems are reported together
    with pytest.raises(ConfigError, match="top_p.*max_tools"):
        LocalDrafterOptions(top_p=0, max_tools=0)
    options = LocalDrafterOptions(max_string_length=None)
    with pytest.raises(AttributeError):
        options.max_calls = 3  # type: ignore[misc]  # frozen
    assert LocalDrafter(None, options).options.max_string_length is None  # unbounded, asked for
    # untuned: the first complete call ends the draft, strings are cut short
    untuned = LocalDrafter(None).options
    assert (untuned.max_calls, untuned.max_string_length) == (1, UNTUNED_LIMITS["max_string_length"])
    assert untuned.copy_bias == 0.0  # an untuned model's values are not nudged


@pytest.mark.anyio
async def test_adapter_is_loaded_through_the_tune_helpers_function(tiny, monkeypatch):
    # A stand-in module: the real spectool.drafters.local._adapter (peft) belongs to the tuning work
    # and is tested there; this checks only that LocalDrafter hands it the model and uses its result.
    model, _ = tiny
    seen = []
    fake = types.ModuleType("spectool.drafters.local._adapter")

    def load_adapter(m, path):
        seen.append((m, path))
        return m

    def adapter_manifest(path):
        seen.append(("manifest", path))
        return {"compact_format_version": 2}

    fake.load_adapter = load_adapter
    fake.adapter_manifest = adapter_manifest
    monkeypatch.setitem(sys.modules, "spectool.drafters.local._adapter", fake)
    drafter = LocalDrafter(tiny, LocalDrafterOptions(max_string_length=12), adapter="/tmp/some-adapter")
    assert seen == [(model, "/tmp/some-adapter"), ("manifest", "/tmp/some-adapter")]
    # it renders in the format the adapter was tuned on, not the newest one
    assert drafter.compact_options["version"] == 2
    # a tuned adapter writes whole responses: parallel calls allowed, long strings uncut
    assert drafter.options.max_calls == TUNED_LIMITS["max_calls"] > 1
    assert drafter.options.max_string_length == 12  # given: kept
    assert drafter.options.copy_bias == TUNED_LIMITS["copy_bias"] > 0
    assert (
        LocalDrafter(tiny, adapter="/tmp/some-adapter").options.max_string_length
        == TUNED_LIMITS["max_string_length"]
    )
    calls = await drafter.propose(DraftRequest(_turns()[0], TOOLS, samples=1))
    assert len(calls) == 1


def test_options_from_strings_types_words_and_reuses_the_field_checks():
    options = LocalDrafterOptions.from_strings(
        {
            "prompt": "native",
            "diversity": "beam",
            "min_confidence": "0.3",
            "max_calls": "4",
            "max_string_length": "none",
            "jump_forward": "false",
        }
    )
    assert options == LocalDrafterOptions(
        prompt="native",
        diversity="beam",
        min_confidence=0.3,
        max_calls=4,
        max_string_length=None,
        jump_forward=False,
    )
    base = LocalDrafterOptions(prompt="native")
    assert LocalDrafterOptions.from_strings({"max_calls": "auto"}, base) == base  # "auto" stays a word
    with pytest.raises(ConfigError, match="unknown LocalDrafterOptions field.*beam_width.*known: prompt"):
        LocalDrafterOptions.from_strings({"beam_width": "3"})
    with pytest.raises(ConfigError, match="diversity must be"):
        LocalDrafterOptions.from_strings({"diversity": "greedy"})
    with pytest.raises(ConfigError, match="max_calls must be"):
        LocalDrafterOptions.from_strings({"max_calls": "2.5"})  # a float is not an int field's value
    with pytest.raises(ConfigError, match="min_confidence must be"):
        LocalDrafterOptions.from_strings({"min_confidence": "nan"})
    assert LocalDrafterOptions.from_strings({"jump_forward": "0"}).jump_forward is False  # a flag reads 1 / 0
    with pytest.raises(ConfigError, match="jump_forward must be a bool"):
        LocalDrafterOptions.from_strings({"jump_forward": "2"})
