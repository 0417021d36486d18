"""The serving engine with a tree decoding policy for ordinary text (real SmolLM2, fp32)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model

BODY = {"messages": [{"role": "user", "content":
                      "Repeat this sentence exactly: The library opens at nine and closes at "
                      "six, and children under twelve enter for free."}],
        "temperature": 0, "max_tokens": 32}


@pytest.fixture(scope="module")
def loaded():
    from spectool_serving.models import load_model

    return load_model(None, dtype="float32")


def _run(engine):
    from spectool_serving.requests import build_sequences

    seqs = build_sequences(BODY, engine, "chatcmpl-tree", "")
    events: list[dict] = []
    seqs[0].emit = events.append
    engine.add(seqs[0])
    engine.run_until_idle()
    return [e for e in events if e["type"] == "finish"][0]["content"]


def test_unispec_policy_in_engine_is_lossless_and_drafts(loaded):
    from spectool_serving.server import build_engine

    plain = _run(build_engine(loaded=loaded))
    eng = build_engine(loaded=loaded, decoding="unispec")
    assert _run(eng) == plain
    stats = eng.decoding.stats
    assert stats.steps > 0 and stats.drafted > 0 and stats.tau > 1.0
