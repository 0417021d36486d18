"""``spectool serve --backend vllm`` on the real vLLM: the user's model name, the default
``max_tokens``, a disconnect that stops its generation, and SIGTERM that leaves no process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .helpers import chat_body, free_port, quick_start

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "out" / "vllm-serve-real.log"


def _session(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat: the session id
                out.append(int(entry))
    return out


def _running(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running in /metrics")


@pytest.fixture
def served():
    """``spectool serve --backend vllm`` started and healthy: (its process, its URL). Its own
    session, so the cleanup reaches whatever the test's SIGTERM leaves behind."""
    from spectool_serving.vllm.serve import vllm_env_missing

    if vllm_env_missing():  # $SPECTOOL_VLLM_PYTHON or .venv-vllm, else build it (minutes, once)
        subprocess.run(["bash", str(ROOT / "scripts" / "setup-vllm.sh")], check=True)
    port = free_port()
    LOG.parent.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "spectool.cli", "serve", "--backend", "vllm", "--model", "embedded"]
    flags = [
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "8192",
        "--default-max-tokens",
        "24",
    ]
    # the model in the engine-core process (quick_start): a vLLM import less on the way up;
    # the tree SIGTERM must stop is then the API server and its engine core
    env = quick_start(dict(os.environ))
    with open(LOG, "wb") as log:
        proc = subprocess.Popen(
            [*argv, *flags], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            deadline = time.monotonic() + 600
            while True:
                assert proc.poll() is None, f"spectool serve exited; see {LOG}"
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(1)
        yield proc, url
    finally:
        if proc.poll() is None or _session(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_spectool_serve_backend_vllm_end_to_end(served):
    proc, url = served
    with httpx.Client(base_url=url, timeout=120) as client:
        # the name the user gave answers, and the documented smollm2
        names = {m["id"] for m in client.get("/v1/models").json()["data"]}
        assert {"embedded", "smollm2"} <= names
        body = chat_body("Tell me a very long story about Paris.", tool_choice="none", model="embedded")
        body.pop("max_tokens", None)
        body["ignore_eos"] = True  # a vLLM extra: runs to the default cap, never stops early
        usage = client.post("/v1/chat/completions", json=body).json()["usage"]
        assert usage["completion_tokens"] == 24  # the default max_tokens, as --default-max-tokens set it

        # a client that goes away stops its generation
        body["max_tokens"] = 6000
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json=body, timeout=3)
        deadline = time.monotonic() + 30
        while _running(client) > 0:
            assert time.monotonic() < deadline, "generation went on after the client disconnected"
            time.sleep(0.5)

    # SIGTERM with a request in flight: the whole tree goes, no SIGKILL needed
    assert len(_session(proc.pid)) >= 2  # the API server and its engine core
    with httpx.Client(base_url=url, timeout=None) as other:
        stream = other.stream("POST", "/v1/chat/completions", json={**body, "stream": True})
        stream.__enter__()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _session(proc.pid) == []
