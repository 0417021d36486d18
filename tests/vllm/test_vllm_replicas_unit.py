"""Several API processes or replicas (no vLLM needed): the shared record of responses, and
the endpoint's answer to a post for a response another process streams.

Two :class:`SpectoolEndpoint` objects sharing one folder stand in for two API processes of
one server (what ``--api-server-count 2`` starts); one with another server id for another
replica. Requests are real Starlette requests."""

from __future__ import annotations

import json

import anyio
import pytest
from starlette.requests import Request

from spectool import ConfigError, ToolCacheError
from spectool_serving.vllm._endpoint import SpectoolEndpoint
from spectool_serving.vllm._mirror import tenant_tag
from spectool_serving.vllm._registry import Registry

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ITEMS = [{"name": "get_weather", "params": {"city": "Paris"}, "output": "sunny"}]


def _request(body: object, token: str = "alice") -> Request:
    raw = json.dumps(body).encode()

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    headers = [(b"authorization", f"Bearer {token}".encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


def _process(root, server: str = "host:8000", url: str = "http://a:8000") -> SpectoolEndpoint:
    ep = SpectoolEndpoint()
    ep.registry = Registry(root, server, url)
    return ep


def _post(ep: SpectoolEndpoint, rid: str, body: object = ITEMS, token: str = "alice"):
    reply = anyio.run(ep.post, rid, _request(body, token))
    if isinstance(reply, dict):
        return 200, reply, {}
    return reply.status_code, json.loads(reply.body), dict(reply.headers)


def _open(ep: SpectoolEndpoint, rid: str, token: str = "alice") -> None:
    ep.cache.open(rid, token, TOOLS)
    ep._register(rid, token, TOOLS)


def test_a_post_to_the_sibling_process_reaches_the_owner_for_o3(tmp_path):
    owner, sibling = _process(tmp_path), _process(tmp_path)
    _open(owner, "chatcmpl-1")
    status, body, _ = _post(sibling, "chatcmpl-1")
    assert (status, body) == (200, {"cached": 1, "relayed": True})
    assert owner.cache.take("chatcmpl-1", "alice", "get_weather", '{"city": "Paris"}') is None  # not yet read
    owner._ingest("chatcmpl-1", "alice")
    hit = owner.cache.take("chatcmpl-1", "alice", "get_weather", '{"city": "Paris"}')
    assert hit is not None and hit.output == "sunny"
    assert owner.registry.drain(tenant_tag("alice"), "chatcmpl-1") == []  # read once


def test_without_the_shared_record_a_sibling_post_is_lost_as_unknown(tmp_path):
    """Negative control: what one process per server did (the store alone)."""
    owner, sibling = _process(tmp_path), SpectoolEndpoint()
    _open(owner, "chatcmpl-1")
    status, body, _ = _post(sibling, "chatcmpl-1")
    assert status == 404 and "unknown response id" in body["error"]["message"]


def test_sibling_checks_like_the_owner_tenancy_finish_and_bad_items(tmp_path):
    owner, sibling = _process(tmp_path), _process(tmp_path)
    _open(owner, "chatcmpl-1")
    assert _post(sibling, "chatcmpl-1", token="bob")[0] == 404  # another tenant's id: unknown
    assert _post(sibling, "chatcmpl-1", [{"params": {}}])[0] == 422
    assert _post(sibling, "chatcmpl-nope")[0] == 404
    anyio.run(owner._close, "chatcmpl-1", "alice")
    status, body, _ = _post(sibling, "chatcmpl-1")
    assert status == 410, body
    assert owner.registry.drain(tenant_tag("alice"), "chatcmpl-1") == []


def test_a_live_id_in_another_process_is_409_for_the_same_tenant_only(tmp_path):
    a, b = _process(tmp_path), _process(tmp_path)
    _open(a, "chatcmpl-1")
    with pytest.raises(ToolCacheError) as err:
        _open(b, "chatcmpl-1")
    assert err.value.status_code == 409
    assert len(b.cache) == 0 or b.cache.take("chatcmpl-1", "alice", "x", "{}") is None
    _open(b, "chatcmpl-1", token="bob")  # the same id string is bob's own scope


def test_a_post_to_another_replica_is_421_naming_the_owner(tmp_path):
    owner = _process(tmp_path, "host:8000", "http://a:8000")
    other = _process(tmp_path, "host:8001", "http://b:8001")
    _open(owner, "chatcmpl-1")
    status, body, headers = _post(other, "chatcmpl-1")
    assert status == 421 and "http://a:8000" in body["error"]["message"]
    assert headers["x-spectool-owner"] == "http://a:8000"
    assert owner.registry.drain(tenant_tag("alice"), "chatcmpl-1") == []  # nothing moved
    assert _post(owner, "chatcmpl-1") == (200, {"cached": 1}, {})  # the owner takes it itself


def test_expired_records_and_orphan_inboxes_are_swept(tmp_path):
    now = [1000.0]
    reg = Registry(tmp_path, "s", "u", open_ttl=10, grace=5, clock=lambda: now[0])
    reg.open("t", "r1", TOOLS)
    reg.open("t", "r2", TOOLS)
    reg.close("t", "r2")
    assert reg.find("t", "r2") is not None and not reg.find("t", "r2").open  # within grace: 410
    now[0] += 6
    assert reg.find("t", "r2") is None and reg.find("t", "r1") is not None
    now[0] += 5  # r1 open past open_ttl: its owner is gone
    assert reg.sweep() >= 1
    assert reg.find("t", "r1") is None
    assert list((tmp_path / "inbox").iterdir()) == []


def test_finished_records_do_not_pile_up(tmp_path):
    now = [1000.0]
    reg = Registry(tmp_path, "s", "u", grace=5, sweep_every=10, clock=lambda: now[0])
    for i in range(20):
        reg.open("t", f"r{i}", TOOLS)
        reg.close("t", f"r{i}")
    assert len(list((tmp_path / "responses").glob("*.json"))) == 20
    now[0] += 11
    reg.open("t", "fresh", TOOLS)  # opening sweeps, at most every ``sweep_every``
    assert [p.name for p in (tmp_path / "responses").glob("*.json")] == [reg._record_path("t", "fresh").name]


def test_relayed_items_keep_posting_order(tmp_path):
    reg = Registry(tmp_path, "s", "u")
    reg.open("t", "r", TOOLS)
    for i in range(5):
        reg.relay("t", "r", [{"n": i}])
    assert [it["n"] for it in reg.drain("t", "r")] == list(range(5))


def test_shared_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("os.getuid", lambda: 12345)
    with pytest.raises(ConfigError, match="another user"):
        Registry(tmp_path / "x", "s", "u")


def test_several_processes_start_through_vllm_serves_launcher(tmp_path):
    """``--api-server-count`` / ``--data-parallel-size`` are honoured only by ``vllm serve``;
    the api_server module the single-process command runs would ignore them silently."""
    from spectool_serving.vllm.serve import build_command

    folder = tmp_path / "m"
    folder.mkdir()
    one = build_command(str(folder), python="py")
    assert one[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    for flags in (["--api-server-count", "2"], ["--data-parallel-size=2"], ["-dp", "2"]):
        cmd = build_command(str(folder), python="py", extra=flags)
        assert cmd[:3] == ["py", "-m", "spectool_serving.vllm._launch"] and cmd[-len(flags) :] == flags
        assert cmd[3 : -len(flags)] == one[3:]  # the same server otherwise


def test_the_registry_is_on_only_when_another_process_may_get_a_post(tmp_path, monkeypatch):
    from argparse import Namespace

    from spectool_serving.vllm._endpoint import _registry_for

    monkeypatch.delenv("SPECTOOL_VLLM_SHARED_DIR", raising=False)
    assert _registry_for(Namespace(api_server_count=None, data_parallel_size=1, port=1, host=None)) is None
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    reg = _registry_for(Namespace(api_server_count=2, data_parallel_size=1, port=7, host="127.0.0.1"))
    assert reg is not None and reg.url == "http://127.0.0.1:7" and str(reg.root).startswith(str(tmp_path))
    assert (
        _registry_for(Namespace(api_server_count=None, data_parallel_size=2, port=7, host=None)) is not None
    )
    monkeypatch.setenv("SPECTOOL_VLLM_SHARED_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("SPECTOOL_VLLM_ADVERTISE_URL", "http://replica-a:8000")
    reg = _registry_for(Namespace(api_server_count=None, data_parallel_size=1, port=8000, host="0.0.0.0"))
    assert reg is not None and reg.root == tmp_path / "shared" and reg.url == "http://replica-a:8000"
