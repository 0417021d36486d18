"""Tenants stay apart on the vLLM plugin's worker side (issue 26, class 2), without vLLM.

The real endpoint (``SpectoolEndpoint``) and the real worker extension and proposer run here;
only vLLM's ``collective_rpc`` is a fake (it calls the worker extension in-process, as vLLM
does in each worker) and the tokenizer is one token per character (the real one needs the
served model's files).
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from spectool_serving.vllm import proposer as proposer_mod
from spectool_serving.vllm._compat import response_id_of
from spectool_serving.vllm._endpoint import SpectoolEndpoint
from spectool_serving.vllm._mirror import DraftMirror, tenant_tag
from spectool_serving.vllm.worker import ToolCacheWorkerExtension

PROMPT = "Q?"
WRITTEN = PROMPT + '<tool_call>\n{"name": "get_weather", "arguments": '
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


class _CharTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


class _Worker(ToolCacheWorkerExtension):
    def __init__(self, proposer):
        self.model_runner = types.SimpleNamespace(drafter=proposer, input_batch=None)


class _Engine:
    """vLLM's ``collective_rpc``: each worker's method, called in-process (one worker)."""

    def __init__(self, worker):
        self.worker = worker

    async def collective_rpc(self, method, args=()):
        return [getattr(self.worker, method)(*args)]


class _Request:
    def __init__(self, token: str, body: object = None):
        self.headers = {"authorization": f"Bearer {token}"} if token else {}
        self._body = json.dumps(body).encode()

    async def body(self):
        return self._body


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.setattr(proposer_mod, "_load_tokenizer", lambda cfg: _CharTokenizer())
    monkeypatch.setattr(proposer_mod, "_make_fallback", lambda cfg, spec: None)
    p = proposer_mod.ToolCacheProposer(
        types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=32))
    )
    worker = _Worker(p)
    endpoint = SpectoolEndpoint()
    endpoint.engine, endpoint.o2 = _Engine(worker), True
    worker.spectool_attach("chatml")
    return endpoint, p


def _draft(p, engine_id: str, text: str = WRITTEN) -> str:
    """What the proposer drafts for one row running under ``engine_id`` (vLLM's suffix added)."""
    p._runner.input_batch = types.SimpleNamespace(
        req_ids=[f"{engine_id}-Ab12Cd34"], num_prompt_tokens=[len(PROMPT)]
    )
    ids = np.zeros((1, 256), dtype=np.int64)
    ids[0, : len(text)] = [ord(c) for c in text]
    return "".join(map(chr, p.propose([[ord(" ")]], np.array([len(text)]), ids)[0]))


async def _open(endpoint, rid: str, token: str) -> None:
    endpoint.cache.open(rid, token, TOOLS)
    await endpoint._mirror_open(rid, token)


async def _post(endpoint, rid: str, token: str, city: str) -> object:
    item = [{"name": "get_weather", "params": {"city": city}, "output": "sunny"}]
    return await endpoint.post(rid, _Request(token, item))


@pytest.mark.anyio
async def test_a_shared_response_id_never_carries_one_tenants_arguments_to_another(plugin):
    endpoint, p = plugin
    await _open(endpoint, "chatcmpl-shared-2", "tenant-a")
    assert (await _post(endpoint, "chatcmpl-shared-2", "tenant-a", "Paris")) == {"cached": 1}
    assert _draft(p, "chatcmpl-shared-2").startswith('{"city": "Paris"')  # A's own rows: drafted

    # B sends A's X-Request-Id: its own scope in the store, and on the workers A's arguments
    # are never drafted into the rows running under that id (ambiguous: nothing is drafted)
    await _open(endpoint, "chatcmpl-shared-2", "tenant-b")
    assert _draft(p, "chatcmpl-shared-2") == ""
    assert (await _post(endpoint, "chatcmpl-shared-2", "tenant-b", "Oslo")) == {"cached": 1}
    assert [e[1] for e in p.mirror._items[(tenant_tag("tenant-a"), "chatcmpl-shared-2")]] == [
        '{"city": "Paris"}'
    ]

    # B's response closing drops B's entries only: A's rows draft again (no denial of O2)
    await endpoint._close("chatcmpl-shared-2", "tenant-b")
    assert _draft(p, "chatcmpl-shared-2").startswith('{"city": "Paris"')


@pytest.mark.anyio
async def test_a_hop_suffix_is_never_aliased_onto_another_response(plugin):
    endpoint, p = plugin
    await _open(endpoint, "chatcmpl-shared-2", "tenant-a")
    await _post(endpoint, "chatcmpl-shared-2", "tenant-a", "Paris")
    assert response_id_of("chatcmpl-shared-2.h1-Ab12Cd34") == "chatcmpl-shared-2.h1"
    # B's own id "shared-2.h1" is not A's "shared-2": B's rows never see A's arguments
    await _open(endpoint, "chatcmpl-shared-2.h1", "tenant-b")
    assert _draft(p, "chatcmpl-shared-2.h1") == ""
    # A's own O3 hop (run without X-Request-Id as "<id>.h<n>") still drafts from A's entries
    assert _draft(p, "chatcmpl-shared-2.h2").startswith('{"city": "Paris"')


@pytest.mark.anyio
async def test_stats_need_the_credentials_and_show_only_the_tenants_own_drafts(plugin):
    endpoint, p = plugin
    endpoint.api_keys = {"tenant-a", "tenant-b"}
    await _open(endpoint, "chatcmpl-r1", "tenant-a")
    await _post(endpoint, "chatcmpl-r1", "tenant-a", "Paris")
    assert _draft(p, "chatcmpl-r1")
    _draft(p, "chatcmpl-r1", WRITTEN + '{" ')  # A's model wrote something else: a rejection

    assert (await endpoint.collect_stats(_Request(""))).status_code == 401
    assert (await endpoint.collect_stats(_Request("guess"))).status_code == 401
    assert (await endpoint.post("chatcmpl-r1", _Request("guess", []))).status_code == 401
    mine = (await endpoint.collect_stats(_Request("tenant-a")))["o2"][0]
    theirs = (await endpoint.collect_stats(_Request("tenant-b")))["o2"][0]
    assert [r["drafted"] for r in mine["tool_rejections"]] == ['{"city": "Paris"}}\n</tool_call>']
    assert theirs["tool_rejections"] == [] and theirs["tool_proposed"] == mine["tool_proposed"]
    assert "Paris" not in json.dumps(theirs)


def test_negative_control_one_id_for_two_scopes_is_what_blocks_drafts():
    """Same engine id, same tenant, two scopes is impossible (the store refuses a live id with
    409); two different ids of two tenants draft independently."""
    m = DraftMirror()
    m.open(("a", "r1"), ["r1"])
    m.open(("b", "r2"), ["r2"])
    m.put(("a", "r1"), "f", "{}", 2e9)
    m.put(("b", "r2"), "g", "{}", 2e9)
    assert m.entries("r1") == [("f", "{}")] and m.entries("r2") == [("g", "{}")]
