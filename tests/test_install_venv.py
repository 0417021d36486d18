"""The built wheel (not the editable checkout) installs into a fresh venv and serves.

``pip wheel .`` → a fresh venv → ``pip install --no-deps`` the wheel → ``spectool serve --help``
and one chat request to ``spectool serve``. The fresh venv reuses the test environment's
third-party packages through a path entry rather than downloading torch again (CI time);
spectool itself comes only from the wheel, so missing package data (C sources, prompt data,
templates) or a module left out fails here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.install
@pytest.mark.model
def test_wheel_in_a_fresh_venv_serves(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    wheel = next(wheels.glob("spectool-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # third-party packages of this environment, after the venv's own (a path line: the
    # editable finders of this environment's .pth files are not run, so spectool is the wheel's)
    (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import spectool, spectool_serving.backends as b, pathlib; "
            "print(spectool.__file__); print(sorted(p.name for p in "
            "pathlib.Path(b.__file__).parent.glob('*.c')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert str(site) in where and "_layers.c" in where  # the wheel's copy, C sources shipped
    spectool = venv / "bin" / "spectool"
    help_ = subprocess.run(
        [str(spectool), "serve", "--help"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert help_.returncode == 0 and "--decoding" in help_.stdout
    port = _free_port()
    server = subprocess.Popen(
        [str(spectool), "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ]
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=120,
            json={
                "model": "x",
                "max_tokens": 24,
                "tools": tools,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
