"""One real vLLM server for the whole test session (``@pytest.mark.vllm`` tests).

The server runs from ``.venv-vllm`` (built here by ``scripts/setup-vllm.sh`` when missing, a
few minutes once per machine) with spectool's plugins: fp32 and ``--enforce-eager`` so
greedy decoding is reproducible and starts in well under a minute.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "out" / "vllm-test-server.log"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_url():
    subprocess.run(["bash", str(ROOT / "scripts" / "setup-vllm.sh")], check=True)
    from spectool_serving.vllm.serve import VllmServer, build_command, server_env

    port = _free_port()
    cmd = build_command("embedded", port=port, dtype="float32", num_draft_tokens=8)
    env = server_env()
    env["SPECTOOL_VLLM_MAX_HOPS"] = "2"
    LOG.parent.mkdir(exist_ok=True)
    with VllmServer(cmd, port=port, env=env, log_path=str(LOG), start_timeout=600) as server:
        yield server.url


@pytest.fixture
def client(vllm_url):
    with httpx.Client(base_url=vllm_url, timeout=300) as c:
        yield c
