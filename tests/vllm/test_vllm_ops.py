"""Operating ``spectool serve --backend vllm``: vLLM's flags pass through, SIGTERM leaves no
process behind, a busy port fails fast, served names, the default ``max_tokens``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spectool import ConfigError
from spectool.cli import main as cli_main
from spectool_serving.vllm.serve import build_command

from .helpers import free_port

ROOT = Path(__file__).resolve().parents[2]


def _printed(capsys, *argv: str) -> list[str]:
    # before the words: after a "--" in them it would be one of vLLM's flags, not ours
    assert cli_main(["serve", "--backend", "vllm", "--print-command", *argv]) == 0
    return capsys.readouterr().out.split()


def test_the_documented_command_parses_and_passes_vllm_flags_through(capsys, tmp_path):
    cmd = _printed(
        capsys, "--model", str(tmp_path), "--tool-call-parser", "xlam", "--max-model-len", "4096", "--seed=3"
    )
    assert cmd[cmd.index("--model") + 1] == str(tmp_path)
    # the user's parser replaces the default one; it appears exactly once
    assert cmd.count("--tool-call-parser") == 1 and cmd[cmd.index("--tool-call-parser") + 1] == "xlam"
    assert cmd[cmd.index("--max-model-len") + 1] == "4096" and "--seed=3" in cmd


def test_a_flag_value_is_never_taken_for_the_positional_model(capsys, tmp_path):
    cmd = _printed(capsys, str(tmp_path), "--max-model-len", "4096")
    assert cmd[cmd.index("--model") + 1] == str(tmp_path)
    assert cmd[cmd.index("--max-model-len") + 1] == "4096"


def test_vllm_flags_without_the_vllm_backend_are_an_error(capsys):
    assert cli_main(["serve", "--max-model-len", "4096"]) == 1
    assert "unrecognized arguments: --max-model-len" in capsys.readouterr().err


def test_log_level_and_access_log_reach_vllm(capsys, tmp_path):
    cmd = _printed(capsys, "--model", str(tmp_path), "--log-level", "warning", "--no-access-log")
    assert cmd[cmd.index("--uvicorn-log-level") + 1] == "warning" and "--disable-uvicorn-access-log" in cmd


def test_the_model_answers_to_the_name_the_user_gave(tmp_path):
    folder = tmp_path / "xLAM-2-1b-fc-r"
    folder.mkdir()
    cmd = build_command(str(folder), python="py")
    names = cmd[cmd.index("--served-model-name") + 1 : cmd.index("--tool-call-parser")]
    assert names == [str(folder), "xLAM-2-1b-fc-r"]
    mine = build_command(str(folder), python="py", extra=["--served-model-name", "main"])
    assert mine.count("--served-model-name") == 1 and mine[-1] == "main"


def test_a_busy_port_fails_before_anything_loads(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is in use"):
            from spectool_serving.vllm.serve import main

            main(["--model", str(tmp_path), "--port", str(port)])


# A stand-in for vLLM's API server: a process of the same shape (an API server that starts an
# engine process and stops it on SIGTERM, as vLLM's does). Starting the real vLLM costs about a
# minute; the real one is checked in test_vllm_serve_real.py. It writes its pid and its child's.
FAKE_VLLM = """\
#!{python}
import os, signal, subprocess, sys, time
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
def stop(*_):
    core.terminate(); core.wait(); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(os.environ["FAKE_PIDS"], "w") as f:
    f.write(f"{{os.getpid()}} {{core.pid}}")
while True:
    time.sleep(0.1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent has not reaped it yet)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_sigterm_to_spectool_serve_stops_the_whole_vllm_process_tree(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    pids = tmp_path / "pids"
    env = {**os.environ, "SPECTOOL_VLLM_PYTHON": str(fake), "FAKE_PIDS": str(pids)}
    argv = [sys.executable, "-m", "spectool.cli", "serve", str(tmp_path), "--backend", "vllm"]
    # its own session, so the cleanup below reaches whatever a broken version leaves behind
    proc = subprocess.Popen([*argv, "--port", str(free_port())], env=env, cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, "spectool serve exited early"
            time.sleep(0.05)
        server, core = map(int, pids.read_text().split())
        assert server == proc.pid  # exec: the process the user signals is vLLM's API server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while _alive(core) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(core)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_the_setting_for_the_default_max_tokens_is_typed(monkeypatch):
    from spectool.settings import settings

    assert settings().vllm_default_max_tokens == 256  # the torch engine's default too
    monkeypatch.setenv("SPECTOOL_VLLM_DEFAULT_MAX_TOKENS", "64")
    assert settings().vllm_default_max_tokens == 64
    monkeypatch.setenv("SPECTOOL_VLLM_DEFAULT_MAX_TOKENS", "lots")
    with pytest.raises(ConfigError, match="SPECTOOL_VLLM_DEFAULT_MAX_TOKENS"):
        settings()


def test_open_requests_end_when_the_engine_stops():
    """SIGTERM stops vLLM's engine first; a request still waiting on it must end, or uvicorn's
    graceful shutdown waits for its connection forever."""
    import asyncio

    from spectool_serving.vllm._inflight import InFlight

    class Engine:  # the one attribute InFlight reads from vLLM's AsyncLLM
        errored = False

    async def main() -> list[str]:
        engine, inflight, events = Engine(), InFlight(period=0.01), []
        inflight.watch(engine)

        async def request(name: str) -> None:
            with inflight.track():
                try:
                    await asyncio.sleep(3600)  # a stream the stopped engine will never feed
                except asyncio.CancelledError:
                    events.append(f"{name} ended")
                    raise

        tasks = [asyncio.create_task(request(n)) for n in ("a", "b")]
        await asyncio.sleep(0.05)
        assert events == [] and len(inflight.tasks) == 2  # a running engine ends nothing
        engine.errored = True
        await asyncio.wait(tasks, timeout=5)
        assert all(t.cancelled() for t in tasks) and not inflight.tasks
        return sorted(events)

    assert asyncio.run(main()) == ["a ended", "b ended"]


def test_every_serve_command_in_docs_vllm_parses(capsys):
    """The commands docs/vllm.md shows, as written (up to the print), build a vLLM command."""
    import re
    import shlex

    from spectool_serving.vllm.serve import main as serve_main

    text = (ROOT / "docs" / "vllm.md").read_text()
    bash = "\n".join(re.findall(r"```bash\n(.*?)```", text, re.S)).replace("\\\n", " ")
    wanted = [
        x for x in bash.splitlines() if re.match(r"\s*(\S+=\S+ )*(spectool serve|python -m spectool_s)", x)
    ]
    lines = [shlex.split(line.split("#")[0]) for line in wanted]
    serve = [w for w in lines if w[:2] == ["spectool", "serve"]]
    module = [w for w in lines if "spectool_serving.vllm.serve" in w]
    assert any("--tool-call-parser" in w for w in serve) and module
    for words in serve:
        cmd = _printed(capsys, *[w for w in words[2:] if w not in ("--backend", "vllm")])
        # several API processes or DP ranks start through our launcher, which runs vLLM's serve
        launcher = "--api-server-count" in words or "--data-parallel-size" in words
        wanted = "spectool_serving.vllm._launch" if launcher else "vllm.entrypoints.openai.api_server"
        assert cmd[1:3] == ["-m", wanted]
    for words in module:
        rest = words[words.index("spectool_serving.vllm.serve") + 1 :]
        assert serve_main(["--print-command", *[w for w in rest if w != "--print-command"]]) == 0
        cmd = capsys.readouterr().out.split()
        assert "--enable-auto-tool-choice" in cmd
        if "--tensor-parallel-size" in rest:
            assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
