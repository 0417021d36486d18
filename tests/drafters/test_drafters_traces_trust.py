"""Trace files are a peer's data (issue 26, class 6): malformed lines are a ConfigError naming
the file and line, and tuning streams a trace file instead of holding all of it."""

from __future__ import annotations

import gc
import json
import tracemalloc
import weakref

import pytest

from spectool import ConfigError, load_traces
from spectool.drafters.tune._tune import encode_fitting, training_examples

GOOD = {
    "v": 1,
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [],
    "calls": [{"name": "f", "arguments": {}}],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"calls": [{"name": "f", "arguments": '{"x": 1}'}]}, "arguments must be a JSON object"),
        ({"calls": [{"name": 7, "arguments": {}}]}, "name must be a non-empty string"),
        ({"calls": [{"arguments": {}}]}, "name must be a non-empty string"),
        ({"calls": ["f"]}, r"calls\[0\] must be a JSON object"),
        ({"messages": "hello"}, "messages must be a JSON array"),
        ({"messages": ["hello"]}, r"messages\[0\] must be a JSON object"),
        ({"tools": {"f": {}}}, "tools must be a JSON array"),
        ({"meta": "x"}, "meta must be a JSON object"),
        ({"v": True}, "newer"),
    ],
)
def test_a_malformed_trace_line_is_a_config_error_with_file_and_line(tmp_path, change, says) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **change}) + "\n")
    with pytest.raises(ConfigError, match=rf"t\.jsonl:2: .*{says}"):
        load_traces(path)


def test_a_good_trace_line_loads() -> None:
    """Negative control for the checks above: the unchanged line is accepted."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        path.write_text(json.dumps(GOOD) + "\n")
        (ex,) = load_traces(path)
    assert ex.calls[0].name == "f" and ex.request.messages[0]["content"] == "hi"


LINE_BYTES = 1 << 20  # 1 MiB of text per line
LINES = 16


def _big_trace(path) -> None:
    with path.open("w") as fh:
        for i in range(LINES):
            line = {
                **GOOD,
                "messages": [{"role": "user", "content": "x" * LINE_BYTES}],
                "meta": {"category": f"c{i % 2}"},
            }
            fh.write(json.dumps(line) + "\n")


def _peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_tuning_data_streams_one_line_at_a_time(tmp_path) -> None:
    path = tmp_path / "big.jsonl"
    _big_trace(path)

    def consume():
        examples, data = training_examples(str(path), max_per_category=3, seed=1)
        n = sum(1 for _ in examples)  # what tune() does: each example once, then let go
        assert n == 6 and data["examples_by_category"] == {"c0": 3, "c1": 3}

    streamed = _peak(consume)
    held = _peak(lambda: load_traces(path))  # negative control: the whole file at once
    # a few lines' worth (the line, its parsed copy, the example before), whatever the length
    assert streamed < 6 * LINE_BYTES
    assert held > (LINES - 1) * LINE_BYTES


def test_encoding_keeps_only_what_fits_and_lets_each_example_go() -> None:
    """``tune`` encodes from an iterator: an example too long is dropped at once, and no
    example stays referenced after it was encoded."""
    from spectool import ToolCall
    from spectool._traces import TraceExample
    from spectool._types import DraftRequest

    refs: list[weakref.ref] = []  # TraceExample is frozen, hence hashed by value: no WeakSet
    most_alive = 0

    def examples():
        nonlocal most_alive
        for n in (3, 50, 4, 60):
            ex = TraceExample(
                DraftRequest(messages=[{"role": "user", "content": "a" * n}], tools=[]), [ToolCall("f", {})]
            )
            refs.append(weakref.ref(ex))
            gc.collect()
            most_alive = max(most_alive, sum(1 for r in refs if r() is not None))
            yield ex

    class Chars:  # one token per character of the prompt's user text; a stand-in tokenizer
        pass

    import spectool.drafters.tune._tune_data as tune_mod  # where encode_fitting finds encode_example

    def encode(tokenizer, ex):
        n = len(ex.request.messages[0]["content"])
        return tune_mod.Encoded(list(range(n)), list(range(n)))

    original, tune_mod.encode_example = tune_mod.encode_example, encode
    try:
        kept, dropped = encode_fitting(Chars(), examples(), max_tokens=10)
    finally:
        tune_mod.encode_example = original
    assert [len(e.input_ids) for e in kept] == [3, 4] and dropped == 2
    assert most_alive <= 2  # the one being encoded and at most the one before it
