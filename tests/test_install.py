"""Packaging as documented: each extra carries what its code imports, and a built wheel
(not the editable checkout) installs into a fresh venv and serves.

Two checks, both against real metadata:

* static: every third-party package a layer imports (grimp's graph, lazy imports included)
  is a requirement of that layer's extra, directly or through the requirements of the
  installed distributions it pulls in;
* live (marker ``install``): ``pip wheel .`` → a fresh venv → ``pip install --no-deps`` the
  wheel → ``spectool serve --help`` and one chat request to ``spectool serve``; the wheel holds
  the CPU kernel library built at install, and the installed package loads that copy. The fresh
  venv reuses the test environment's third-party packages through a path entry rather than
  downloading torch again (CI time); spectool itself comes only from the wheel, so missing
  package data (C sources, prompt data, templates) or a module left out fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# what each extra must cover: (import roots, modules left out and why, modules only (prefixes))
LAYERS = {
    "serve": (
        ["spectool_serving"],
        (
            "spectool_serving.vllm",  # [vllm], its own venv
            "spectool_serving.bench",
            "spectool_serving.tree.bench",
        ),  # [bench]
        (),
    ),
    # the in-process drafter: model loading, grammar, adapters, int8, tuning
    "local": (["spectool"], (), ("spectool.drafters", "spectool._embedded")),
    "tracing": (["spectool"], (), ("spectool._tracing",)),
}
STDLIB = set(sys.stdlib_module_names)
# (module, distribution) imported only on a path another extra serves
ALLOWED = {("spectool_serving.tree.calibrate", "scipy"), ("spectool_serving.tree.calibrate", "scikit-learn")}
# ^ the g* fit, reached from `spectool calibrate` / `decode-bench` only: [bench]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(extra: str) -> set[str]:
    """Distributions an install of spectool[extra] brings, from the pyproject and the
    installed distributions' own requirements (markers evaluated, no extras beyond those named)."""
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    todo += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name == "spectool":
            for e in req.extras:
                todo += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][e]]
            continue
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, requires):
            if (
                not r.marker
                or r.marker.evaluate({"extra": ""})
                or any(r.marker.evaluate({"extra": e}) for e in req.extras)
            ):
                todo.append(r)
    return seen


def _imported_distributions(
    roots: list[str], skip: tuple[str, ...], only: tuple[str, ...] = ()
) -> dict[str, set[str]]:
    import grimp

    graph = grimp.build_graph(*roots, "spectool", include_external_packages=True, cache_dir=None)
    dists = metadata.packages_distributions()
    ours = set(roots) | {"spectool"}
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        if (
            module.split(".")[0] in roots
            and not module.startswith(skip)
            and (not only or module.startswith(only))
        ):
            for target in graph.find_modules_directly_imported_by(module):
                top = target.split(".")[0]
                if top in ours or top in STDLIB:
                    continue
                for dist in dists.get(top, [top]):
                    if (module, _norm(dist)) not in ALLOWED:
                        out.setdefault(_norm(dist), set()).add(module)
    return out


@pytest.mark.parametrize("extra", sorted(LAYERS))
def test_each_extra_installs_what_its_code_imports(extra):
    roots, skip, only = LAYERS[extra]
    have = _closure(extra)
    missing = {
        d: sorted(m)[:3] for d, m in _imported_distributions(roots, skip, only).items() if d not in have
    }
    assert missing == {}


@pytest.mark.parametrize("extra", ["serve", "local"])
def test_the_check_catches_a_missing_requirement(monkeypatch, extra):
    """Without xgrammar in [local] (the bugs this test was written for: first [serve], then the
    drafter's own extra lacked it) the check fails for both extras."""
    extras = dict(PYPROJECT["project"]["optional-dependencies"])
    extras["local"] = [r for r in extras["local"] if not r.startswith("xgrammar")]
    monkeypatch.setitem(PYPROJECT["project"], "optional-dependencies", extras)
    missing = set(_imported_distributions(*LAYERS[extra])) - _closure(extra)
    assert "xgrammar" in missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_kernel_library(wheel: Path, py: Path, site: Path, env: dict, cwd: Path) -> None:
    """The CPU kernel library is built into the wheel (an optional extension: only where a C
    compiler is) and, on an AVX-512 CPU, it is what the installed package loads."""
    if not shutil.which("gcc") and not shutil.which("cc"):
        return
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("spectool_serving/backends/libspectool_kernels-") for n in names), names
    from spectool_serving.backends import kernels  # torch: only for this check

    if not kernels._cpu_has("avx512f"):
        return
    loaded = subprocess.run(
        [str(py), "-c", "from spectool_serving.backends import kernels; print(kernels.library()._name)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=cwd,
    ).stdout.strip()
    assert loaded.startswith(str(site / "spectool_serving" / "backends" / "libspectool_kernels-")), loaded


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
    _check_kernel_library(wheel, py, site, env, tmp_path)
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
