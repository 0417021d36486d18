"""Packaging as documented, live: the built wheel (not the editable checkout) installs into fresh
venvs and works. The wheel is built once for the module (``pip wheel .``, about 2 s).

Light installs, resolved for real: the core, ``[tracing]`` and ``[bench]`` each get a fresh venv
with its own pip and ``pip install 'spectool-<ver>.whl[extra]'`` from the package index, so pip's
own resolution decides what lands there. The measurement distribution's wheel
(``spectool-bench``, built from ``bench/``) goes into the ``[bench]`` venv without its
``spectool[serve]`` requirement (torch: see below) but with its own additions from the index.
What the static check in test_install.py cannot see fails here: it reads this environment's
installed metadata, not what pip resolves today (a range that admits a release the code cannot
use), nor imports grimp does not follow (BFCL's tool classes need mpmath), nor an eager import
of an optional package. Measured on a 2-core
machine with a local index mirror: a venv with pip ~5 s; the install ~7 s for the core and
``[tracing]``, ~15 s for ``[bench]`` (matplotlib); whole tests ~10,
~11 and ~30 s.

Heavy installs are not resolved here: ``[local]`` and ``[serve]`` pull torch (~200 MB as a CPU
wheel, GBs with CUDA) and, on Linux x86-64, xgrammar's triton (~1 GB, which scripts/setup.sh
avoids with ``--no-deps``); ``[vllm]`` needs its own venv and minutes. Their requirements are
checked statically; the live test (``test_wheel_in_a_fresh_venv_serves``) installs the wheel with
``--no-deps`` into a fresh venv that reuses this environment's third-party packages through a
path entry, and serves one chat request. spectool itself comes only from the wheel there, so
missing package data (C sources, prompt data, templates) or a module left out fails; the wheel
holds the CPU kernel library built at install, and the installed package loads that copy.

An unreachable package index fails these tests; it does not skip them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
# optional packages an install may bring; `import spectool` imports none of them
OPTIONAL = (
    "torch",
    "transformers",
    "fastapi",
    "uvicorn",
    "numpy",
    "matplotlib",
    "scipy",
    "sklearn",
    "mpmath",
    "opentelemetry",
)
PROBE = f"""
import importlib.util, json, sys
import spectool
print(json.dumps({{
    "file": spectool.__file__,
    "imported": [m for m in {OPTIONAL!r} if m in sys.modules],
    "installed": [m for m in {OPTIONAL!r} if importlib.util.find_spec(m)],
}}))
"""
# docs/tracing.md's scripted agent: one tool call the drafter predicts, then the answer
AGENT = """
import anyio, spectool
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say

async def agent():
    world = KeyValueWorld(latency=0.05)
    model = ScriptedModel([call("get", key="a"), say("a is 1")], first_token_latency=0.1)
    async with spectool.speculative(openai_client(model), world.toolbox, ScriptedDrafter(model)) as c:
        return await spectool.run_agent(c, model="scripted", messages="a?")
"""


@dataclass
class Venv:
    root: Path
    cwd: Path  # not the checkout, so `import spectool` cannot find the source tree

    @property
    def env(self) -> dict[str, str]:
        # pip's settings (index, proxies, certificates, cache) pass through; nothing that puts the
        # checkout or this environment on the venv's path does
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
        return env | {"PATH": f"{self.root / 'bin'}:/usr/bin:/bin"}

    def run(self, *args: str | Path, timeout: float = 120, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=self.cwd,
        )
        if ok and proc.returncode:
            pytest.fail(
                f"{' '.join(map(str, args))[:300]}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def python(self, code: str) -> str:
        return self.run(self.root / "bin" / "python", "-c", code).stdout

    def spectool(self, *args: str | Path, ok: bool = True) -> subprocess.CompletedProcess:
        return self.run(self.root / "bin" / "spectool", *args, ok=ok)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, ROOT],
        check=True,
        timeout=300,
        cwd=out,
    )
    (built,) = out.glob("spectool-*.whl")
    return built


@pytest.fixture(scope="module")
def bench_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench-wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out]
        + [ROOT / "bench"],
        check=True,
        timeout=300,
        cwd=out,
    )
    (built,) = out.glob("spectool_bench-*.whl")
    return built


# no byte-compiling of what pip installs (thousands of modules for matplotlib, scipy and
# scikit-learn): most of an install's CPU time (those three into a fresh venv: 67 s -> 20 s on
# 2 busy cores), and nothing here depends on .pyc files
PIP_INSTALL = ("-m", "pip", "install", "-q", "--no-compile")


def _fresh_install(wheel: Path, where: Path, extra: str = "") -> tuple[Venv, dict]:
    """A venv with its own pip, `pip install 'wheel[extra]'` from the index, then what every light
    install must do: import the wheel's spectool without its optional packages, and run the CLI."""
    venv = Venv(where / "venv", where)
    venv.run(sys.executable, "-m", "venv", venv.root)
    spec = f"{wheel}[{extra}]" if extra else str(wheel)
    venv.run(venv.root / "bin" / "python", *PIP_INSTALL, spec, timeout=420)
    probe = json.loads(venv.python(PROBE))
    assert probe["file"].startswith(str(venv.root))  # the wheel's copy, not the checkout
    assert probe["imported"] == []  # the core is light, whatever the extra installed
    help_ = venv.spectool("--help").stdout
    assert all(command in help_ for command in ("serve", "bench", "model"))
    return venv, probe


@pytest.mark.install
def test_core_installs_light_and_runs_an_agent(wheel, tmp_path):
    venv, probe = _fresh_install(wheel, tmp_path)
    assert probe["installed"] == []  # pip resolved no optional package
    # served early: a hit, or a join when the early run is still going (timing)
    out = venv.python(
        AGENT + "r = anyio.run(agent); print(r.final_text, r.turns, r.stats['hits'] + r.stats['joins'])"
    )
    assert out.split() == ["a", "is", "1", "2", "1"]
    # each optional feature names its extra
    out = venv.python(
        "import spectool\ntry:\n    spectool.instrument()\nexcept spectool.ConfigError as e:\n    print(e)"
    )
    assert "pip install 'spectool[tracing]'" in out
    figure = venv.spectool("model", "figure", "--out", tmp_path / "f.png", ok=False)
    assert figure.returncode != 0 and "pip install 'spectool[bench]'" in figure.stderr
    # measurement is another distribution: its commands are listed and say what to install
    bench = venv.spectool("bench", "--quick", ok=False)
    assert bench.returncode == 1 and "pip install spectool-bench" in bench.stderr


@pytest.mark.install
def test_tracing_extra_emits_spans_through_an_sdk_provider(wheel, tmp_path):
    venv, probe = _fresh_install(wheel, tmp_path, "tracing")
    assert probe["installed"] == ["opentelemetry"]
    spans = venv.python(
        AGENT
        + """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
spectool.instrument(provider)
anyio.run(agent)
import json
print(json.dumps({s.name: s.attributes.get("spectool.speculative") for s in exporter.get_finished_spans()}))
"""
    )
    # the drafter's call ran early and served the model's (spectool.speculative on the resolve span)
    assert json.loads(spans) == {
        "spectool.draft": None,
        "execute_tool get": True,
        "spectool.resolve get": True,
    }


@pytest.mark.install
def test_bench_extra_draws_figures_and_spectool_bench_runs_bfcl_math(wheel, bench_wheel, tmp_path):
    """[bench] is what spectool itself keeps for figures and fits: light, no torch. spectool-bench
    installs beside it, registers its commands, and brings BFCL's MathAPI (mpmath)."""
    venv, probe = _fresh_install(wheel, tmp_path, "bench")
    assert probe["installed"] == ["numpy", "matplotlib"]
    venv.spectool("model", "figure", "--out", tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the wheel's own requirements, less spectool[serve] (torch), resolved from the index
    meta = zipfile.ZipFile(bench_wheel).read(f"{bench_wheel.name.split('-')[0]}-0.1.0.dist-info/METADATA")
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.decode().splitlines()
        if line.startswith("Requires-Dist:") and not line.split(":", 1)[1].strip().startswith("spectool")
    ]
    assert any(r.startswith("mpmath") for r in requires), requires
    pip = (venv.root / "bin" / "python", *PIP_INSTALL)
    venv.run(*pip, "--no-deps", bench_wheel, timeout=120)
    venv.run(*pip, *requires, timeout=420)
    help_ = venv.spectool("--help").stdout
    assert "not installed" not in help_ and "BFCL multi-agent benchmark" in help_
    assert "--quick" in venv.spectool("bench", "--help").stdout
    # BFCL's MathAPI, imported from the bfcl-eval wheel (mpmath: an import grimp cannot see)
    out = venv.python(
        "from spectool_bench.bfcl._executable import load_class\n"
        "print(load_class('MathAPI')().logarithm(value=8, base=2, precision=5)['result'])"
    )
    assert float(out) == 3.0


def _check_kernel_library(wheel: Path, venv: Venv, site: Path) -> None:
    """The CPU kernel library is built into the wheel (an optional extension: only where a C
    compiler is) and, on an AVX-512 CPU, it is what the installed package loads."""
    if not shutil.which("gcc") and not shutil.which("cc"):
        return
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("spectool_serving/backends/libspectool_kernels-") for n in names), names
    from spectool_serving.backends import kernels  # torch: only for this check

    if not kernels._cpu_has("avx512f"):
        return
    loaded = venv.python("from spectool_serving.backends import kernels; print(kernels.library()._name)")
    assert loaded.strip().startswith(str(site / "spectool_serving" / "backends" / "libspectool_kernels-"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.install
@pytest.mark.model
def test_wheel_in_a_fresh_venv_serves(wheel, tmp_path):
    venv = Venv(tmp_path / "venv", tmp_path)
    venv.run(sys.executable, "-m", "venv", "--without-pip", venv.root)
    py = venv.root / "bin" / "python"
    site = Path(venv.python("import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    # third-party packages of this environment, after the venv's own (a path line: the
    # editable finders of this environment's .pth files are not run, so spectool is the wheel's)
    (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    venv.run(py, *PIP_INSTALL, "--no-deps", "--no-index", wheel, timeout=300)
    where = venv.python(
        "import spectool, spectool_serving.backends as b, pathlib; "
        "print(spectool.__file__); print(sorted(p.name for p in "
        "pathlib.Path(b.__file__).parent.glob('*.c')))"
    )
    assert str(site) in where and "_layers.c" in where  # the wheel's copy, C sources shipped
    _check_kernel_library(wheel, venv, site)
    assert "--decoding" in venv.spectool("serve", "--help").stdout
    port = _free_port()
    server = subprocess.Popen(
        [str(venv.root / "bin" / "spectool"), "serve", "--port", str(port)],
        env=venv.env,
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
