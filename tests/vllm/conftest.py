"""One real vLLM server for the whole test session (``@pytest.mark.vllm`` tests).

The server runs from ``.venv-vllm`` (built here by ``scripts/setup-vllm.sh`` when missing, a
few minutes once per machine) with spectool's plugins: fp32 and ``--enforce-eager`` so
greedy decoding is reproducible, and the model in the engine-core process (``quick_start``):
two processes, each a vLLM import of ~15 s of CPU (the API server's, then the engine core's,
spawned once the first is done), then ~3-5 s to load the model and size the KV cache. That
~35 s of CPU in one chain is the floor of the first vLLM test's set-up: 58-120 s on a busy
2-core machine (load 6-11), less on a quiet one.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from .helpers import free_port, quick_start

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "out" / "vllm-test-server.log"


@pytest.fixture(scope="session")
def vllm_url():
    subprocess.run(["bash", str(ROOT / "scripts" / "setup-vllm.sh")], check=True)
    from spectool_serving.vllm.serve import VllmServer, build_command, server_env

    port = free_port()
    cmd = build_command("embedded", port=port, dtype="float32", num_draft_tokens=8)
    env = quick_start(server_env())
    env["SPECTOOL_VLLM_MAX_HOPS"] = "2"
    LOG.parent.mkdir(exist_ok=True)
    with VllmServer(cmd, port=port, env=env, log_path=str(LOG), start_timeout=600) as server:
        yield server.url


@pytest.fixture
def client(vllm_url):
    with httpx.Client(base_url=vllm_url, timeout=300) as c:
        yield c
