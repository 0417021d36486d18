"""The serving engine with a tree decoding policy for ordinary text (real SmolLM2, fp32)."""

from __future__ import annotations

import pytest

from spectool_serving.sequence import Finish

pytestmark = pytest.mark.model

BODY = {
    "messages": [
        {
            "role": "user",
            "content": "Repeat this sentence exactly: The library opens at nine and closes at "
            "six, and children under twelve enter for free.",
        }
    ],
    "temperature": 0,
    "max_tokens": 32,
}


@pytest.fixture(scope="module")
def loaded():
    from spectool_serving.models import load_model

    return load_model(None, dtype="float32")


def _run(engine):
    from spectool_serving.requests import build_sequences

    seqs = build_sequences(BODY, engine, "chatcmpl-tree", "")
    events: list = []
    seqs[0].emit = events.append
    engine.add(seqs[0])
    engine.run_until_idle()
    return [e for e in events if isinstance(e, Finish)][0].content


def test_unispec_policy_in_engine_is_lossless_and_drafts(loaded):
    from spectool_serving.server import build_engine

    plain = _run(build_engine(loaded=loaded))
    eng = build_engine(loaded=loaded, decoding="unispec")
    trees = []
    draft_tree = eng.decoding.draft_tree

    def spy(*args, **kwargs):
        tree = draft_tree(*args, **kwargs)
        trees.append(tree)
        return tree

    eng.decoding.draft_tree = spy
    assert _run(eng) == plain
    stats = eng.decoding.stats
    assert stats.steps > 0 and stats.drafted > 0 and stats.tau > 1.0
    # greedy text rows are verified as whole trees (some node with two children), not chains
    assert any(max(map(len, t.children())) >= 2 for t in trees if t is not None)
    assert eng.stats.o2_drafted == 0  # text drafts are the policy's, not O2's


def test_tree_metrics_are_exported(loaded):
    """τ, draft size and verify time reach the engine's Prometheus /metrics."""
    import anyio
    import httpx

    from spectool_serving.app import create_app
    from spectool_serving.server import build_engine

    eng = build_engine(loaded=loaded, decoding="unispec")
    _run(eng)

    async def scrape() -> str:
        transport = httpx.ASGITransport(app=create_app(eng))
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return (await client.get("/metrics")).text

    text = anyio.run(scrape)
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("spectool_engine_tree_")
    }
    assert values["spectool_engine_tree_tau"] == eng.decoding.stats.tau > 1.0
    assert values["spectool_engine_tree_drafted_total"] == eng.decoding.stats.drafted > 0
    assert values["spectool_engine_tree_verify_seconds_total"] > 0
    assert values["spectool_engine_tree_mean_draft"] > 0
