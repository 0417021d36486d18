"""What ``spectool serve`` prints and when: a busy port fails before the model loads; the
log level and the access log reach uvicorn; loading shows no dependency chatter."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spectool.cli import main as cli_main


def test_a_busy_port_fails_before_the_model_loads(monkeypatch, capsys):
    import spectool_serving.server as server

    loaded = []
    monkeypatch.setattr(server, "build_server", lambda *a, **k: loaded.append(a) or pytest.fail("loaded"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli_main(["serve", "--port", str(port)]) == 1
    assert loaded == []
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_log_level_and_access_log_reach_uvicorn(monkeypatch):
    import uvicorn

    import spectool_serving.server as server

    class Engine:
        model_name = "m"

        def stop(self):
            self.stopped = True

    class App:
        class state:  # noqa: N801 - the shape of a FastAPI app's state
            engine = Engine()

    seen = {}

    class Server:  # uvicorn's, minus serving: what the CLI configured, and the bound socket
        def __init__(self, config):
            seen["level"], seen["access"] = config.log_level, config.access_log

        def run(self, sockets=None):
            seen["sockets"] = [s.getsockname()[1] for s in sockets]

    monkeypatch.setattr(server, "build_server", lambda *a, **k: App())
    monkeypatch.setattr(uvicorn, "Server", Server)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli_main(["serve", "--port", str(port), "--log-level", "warning", "--no-access-log"]) == 0
    assert seen == {"level": "warning", "access": False, "sockets": [port]}
    assert App.state.engine.stopped
    assert cli_main(["serve", "--port", str(port)]) == 0
    assert seen["level"] == "info" and seen["access"] is True


LOAD = "from spectool_serving.models import load_model; load_model(None); print('loaded')"


@pytest.mark.model
@pytest.mark.parametrize("debug", [False, True], ids=["quiet", "debug"])
def test_loading_the_model_shows_no_dependency_chatter(tmp_path, debug):
    """A fresh conversion of the embedded GGUF and a load: nothing on stderr, unless the
    spectool logger is at DEBUG (the negative control: then transformers' bars show)."""
    from spectool.embedded import cache_dir

    # no network: the wheel, not the model; a link, since the wheel is only read
    (tmp_path / "wheels").symlink_to(cache_dir() / "wheels", target_is_directory=True)
    code = ("import logging; logging.getLogger('spectool').setLevel(logging.DEBUG)\n" if debug else "") + LOAD
    env = {**os.environ, "SPECTOOL_CACHE": str(tmp_path), "PYTHONWARNINGS": "default"}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=600
    )
    # the converted model is ~1 GB per run; pytest keeps three runs of tmp dirs
    shutil.rmtree(tmp_path / "models", ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("loaded")
    chatter = "it/s]" in out.stderr or "Warning" in out.stderr
    assert chatter is debug, out.stderr[-2000:]


EXIT_MID_STEP = """
import atexit, sys, threading

state = {}
# registered before spectool_serving is imported, so it runs after the engine's own exit hook
atexit.register(lambda: print("thread left at exit:", state["engine"]._thread is not None, flush=True))

from spectool_serving.requests import build_sequences
from spectool_serving.server import build_engine

engine = state["engine"] = build_engine(tool_cache=False)
messages = [{"role": "user", "content": "Tell a long story."}]
body = {"model": "m", "max_tokens": 400, "temperature": 0, "messages": messages}
[seq] = build_sequences(body, engine, "chatcmpl-exit", "")
started = threading.Event()
seq.emit = lambda event: started.set()
engine.start()
engine.add(seq)
started.wait(120)
print("generating; main thread ends now", flush=True)
"""


@pytest.mark.model
def test_a_script_that_ends_mid_generation_exits_cleanly(tmp_path):
    """The engine thread is stopped and joined at exit: the interpreter never finalizes while
    it is inside a forward (the rare rc 134 of examples/engine_side.py)."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", EXIT_MID_STEP], capture_output=True, text=True, cwd=root, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-2:] == ["generating; main thread ends now", "thread left at exit: False"]
