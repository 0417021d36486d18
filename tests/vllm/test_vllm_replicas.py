"""The vLLM backend with several API-server processes and two data-parallel ranks, on the real
vLLM (CPU, the embedded model): a cache post works whichever process receives it.

vLLM hands connections to its API processes through one port (``SO_REUSEPORT``), so a client
cannot choose the process: every post here goes on a fresh connection, and the run goes on
(up to 10 short requests) until a post landed on a process that does not stream the response
(the endpoint says ``"relayed": true``): the case one process per server never met. Every
post before it must have been served as well.

One server for the module: ``--data-parallel-size 2`` starts two engine cores and, by vLLM's
default, one API process per rank, so it is also the several-API-processes case. Each test pins
its requests to one rank (vLLM's ``X-data-parallel-rank`` header), so the rank that serves them
is known, not left to the load balancer. A second server with ``--api-server-count 2`` (one
engine) would cost another start (launcher, two API processes, an engine core: four vLLM
imports of ~14 s of CPU each) for the same relay path; that launch is what it alone covered."""

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


@pytest.fixture(scope="module")
def dp2():
    """The server with two data-parallel ranks (and so two API processes), for the module."""
    from spectool_serving.vllm.serve import VllmServer, build_command, server_env, vllm_env_missing

    if vllm_env_missing():
        pytest.fail(f"the vLLM tests need vLLM: {vllm_env_missing()}")
    port = free_port()
    # the model in each engine-core process (quick_start; with ranks vLLM would pick worker
    # processes unless told): one process per rank fewer to start
    flags = ["--data-parallel-size", "2", "--distributed-executor-backend", "uni", "--max-model-len", "4096"]
    cmd = build_command("embedded", port=port, dtype="float32", extra=flags)
    env = quick_start(server_env())
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # two engines on a shared machine
    env["SPECTOOL_VLLM_MAX_HOPS"] = "2"
    (ROOT / "out").mkdir(exist_ok=True)
    log = str(ROOT / "out" / "vllm-dp2.log")
    with VllmServer(cmd, port=port, env=env, log_path=log, start_timeout=600) as server:
        yield server
    # the default shared folder of the server's port (the server leaves it, as /tmp files go)
    shutil.rmtree(Path(tempfile.gettempdir()) / f"spectool-vllm-{os.getuid()}-{port}", ignore_errors=True)


def _exchange(url: str, body: dict, output: str, rank: dict) -> tuple[tuple[int, dict], list[dict]]:
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
        headers={"X-Request-Id": base, **rank},
        timeout=300,
    ) as resp:
        assert resp.status_code == 200, resp.read()
        chunks = [
            json.loads(x[6:]) for x in resp.iter_lines() if x.startswith("data: ") and x != "data: [DONE]"
        ]
    poster.join()
    return reply[0], chunks


def _posts_land_anywhere(url: str, rank: int) -> int:
    """Run exchanges on ``rank`` until a post was relayed; the drafts rank 0's engine proposed
    during the relayed exchanges (``/spectool/stats`` shows rank 0's counters)."""
    pin = {"X-data-parallel-rank": str(rank)}
    body = chat_body("What is the weather in Paris?")
    plain = httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"x-spectool-o3": "off", **pin}, timeout=300
    )
    body["_plain"] = plain.json()["choices"][0]["message"]
    assert final_call(body["_plain"]) is not None
    seen, relayed_drafts = set(), 0
    for i in range(10):
        before = httpx.get(f"{url}/spectool/stats").json()["o2"][0]["tool_proposed"]
        (status, reply), chunks = _exchange(url, body, f"sunny-{i}", pin)
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
    return relayed_drafts


def test_a_post_to_the_other_api_process_drafts_on_the_engine(dp2):
    """Requests on rank 0, whose counters ``/spectool/stats`` shows: a post relayed from the API
    process that does not stream the response still feeds O3, and O2 drafted from it (the
    mirror's ``collective_rpc`` reaches the engine from the owner process)."""
    assert _posts_land_anywhere(dp2.url, rank=0) > 0


def test_two_data_parallel_ranks(dp2):
    """vLLM-CPU 0.32 runs ``--data-parallel-size 2`` (two engine cores, and one API process
    per rank by vLLM's default); requests on rank 1: posts are relayed between the API
    processes and answer O3 there too (rank 1's O2 counters are not visible: stats are rank
    0's). The control of the test above: rank 0's counters do not move while the requests,
    their O3 hops included, run on rank 1, so its drafts were not counted from another rank."""
    assert _posts_land_anywhere(dp2.url, rank=1) == 0
