"""The vLLM backend with several API-server processes, and with two data-parallel ranks, on
the real vLLM (CPU, the embedded model): a cache post works whichever process receives it.

vLLM hands connections to its API processes through one port (``SO_REUSEPORT``), so a client
cannot choose the process: every post here goes on a fresh connection, and the run goes on
(up to 10 short requests) until a post landed on a process that does not stream the response
(the endpoint says ``"relayed": true``): the case one process per server never met. Every
post before it must have been served as well."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from .helpers import chat_body, final_call, free_port, post_until_known, quick_start

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]


def _server(flags: list[str], log: str):
    from spectool_serving.vllm.serve import VllmServer, build_command, server_env, vllm_env_missing

    if vllm_env_missing():
        pytest.fail(f"the vLLM tests need vLLM: {vllm_env_missing()}")
    port = free_port()
    # the model in each engine-core process (quick_start; with ranks vLLM would pick worker
    # processes unless told): one process per rank fewer to start
    flags = [*flags, "--distributed-executor-backend", "uni", "--max-model-len", "4096"]
    cmd = build_command("embedded", port=port, dtype="float32", extra=flags)
    env = quick_start(server_env())
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # two engines on a shared machine
    env["SPECTOOL_VLLM_MAX_HOPS"] = "2"
    (ROOT / "out").mkdir(exist_ok=True)
    return VllmServer(cmd, port=port, env=env, log_path=str(ROOT / "out" / log), start_timeout=600)


def _exchange(url: str, body: dict, output: str) -> tuple[tuple[int, dict], list[dict]]:
    """Stream one chat; post its cache entry on fresh connections until the id is known."""
    base = uuid.uuid4().hex
    rid = f"chatcmpl-{base}"
    reply: list = []
    call = final_call(body["_plain"])
    items = [{"name": call[0], "params": call[1], "output": output}]

    def post() -> None:  # a fresh connection each time: the kernel picks the process
        reply.append(
            post_until_known(lambda: httpx.post(f"{url}/cache-tool-output/{rid}", json=items, timeout=60))
        )

    poster = threading.Thread(target=post)
    poster.start()
    chunks = []
    request = {k: v for k, v in body.items() if k != "_plain"}
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={**request, "stream": True},
        headers={"X-Request-Id": base},
        timeout=300,
    ) as resp:
        assert resp.status_code == 200, resp.read()
        chunks = [
            json.loads(x[6:]) for x in resp.iter_lines() if x.startswith("data: ") and x != "data: [DONE]"
        ]
    poster.join()
    return reply[0], chunks


def _posts_land_anywhere(url: str, o2_engine_wide: bool) -> None:
    body = chat_body("What is the weather in Paris?")
    plain = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"x-spectool-o3": "off"}, timeout=300)
    body["_plain"] = plain.json()["choices"][0]["message"]
    assert final_call(body["_plain"]) is not None
    seen, relayed_drafts = set(), 0
    for i in range(10):
        before = httpx.get(f"{url}/spectool/stats").json()["o2"][0]["tool_proposed"]
        (status, reply), chunks = _exchange(url, body, f"sunny-{i}")
        if status == 410:  # the whole response finished before the post: a lost race, not a loss
            continue
        assert status == 200, reply
        seen.add(bool(reply.get("relayed")))
        if reply.get("relayed"):
            relayed_drafts += httpx.get(f"{url}/spectool/stats").json()["o2"][0]["tool_proposed"] - before
        resolved = [
            c["spectool_resolved_call"]
            for ch in chunks
            for c in ch["choices"]
            if "spectool_resolved_call" in c
        ]
        assert resolved and all(r["output"] == f"sunny-{i}" for r in resolved), (reply, chunks[-3:])  # O3
        if True in seen:
            break
    assert True in seen, "no post reached a process that does not stream its response"
    if o2_engine_wide:  # one engine: its counters are every process's (with ranks: rank 0's)
        assert relayed_drafts > 0  # O2 drafted from posts that reached the other process


def _forget(server) -> None:
    """The default shared folder of the server's port (the server leaves it, as /tmp files go)."""
    shutil.rmtree(
        Path(tempfile.gettempdir()) / f"spectool-vllm-{os.getuid()}-{server.port}", ignore_errors=True
    )


def test_two_api_server_processes():
    with _server(["--api-server-count", "2"], "vllm-api2.log") as server:
        _posts_land_anywhere(server.url, o2_engine_wide=True)
    _forget(server)


def test_two_data_parallel_ranks():
    """vLLM-CPU 0.32 runs ``--data-parallel-size 2`` (two engine cores, and one API process
    per rank by vLLM's default); posts are relayed between the API processes, and the O2
    mirror reaches both ranks (``collective_rpc`` goes to every engine)."""
    with _server(["--data-parallel-size", "2"], "vllm-dp2.log") as server:
        _posts_land_anywhere(server.url, o2_engine_wide=False)
    _forget(server)
