"""``spectool serve``: its flags mean the same on the torch and the vLLM backend.

dtype ``auto`` (the default) is bfloat16 on a GPU and float32 on a CPU on both; a flag only
the torch engine has is an error under ``--backend vllm``, naming vLLM's equivalent; one
default ``max_tokens``; ``--no-tool-cache`` turns off both O2 and O3. The torch server's
model load and the vLLM exec are replaced by recorders (no model is loaded here, and vLLM
runs in its own environment): what is checked is what each backend would be started with."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from spectool.cli import main as cli_main


class Started(Exception):
    pass


@pytest.fixture
def vllm_exec(monkeypatch):
    """The vLLM exec, recorded: (command, environment)."""
    seen: dict = {}

    def execve(path, cmd, env):
        seen.update(cmd=cmd, env=env)
        raise Started

    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.setenv("SPECTOOL_VLLM_PYTHON", sys.executable)
    return seen


@pytest.fixture
def torch_build(monkeypatch):
    """The torch server's build_server, recorded (its keyword arguments)."""
    import spectool_serving.server as server

    seen: dict = {}

    def build_server(model, **kwargs):
        seen.update(kwargs)
        raise Started

    monkeypatch.setattr(server, "build_server", build_server)
    return seen


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _vllm(*argv: str) -> int:
    return cli_main(
        ["serve", "--backend", "vllm", "--model", "/nonexistent-model", "--port", _free_port(), *argv]
    )


def _flag(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


@pytest.mark.parametrize(("flavour", "wanted"), [("gpu", "bfloat16"), ("cpu", "float32")])
def test_dtype_auto_is_bf16_on_a_gpu_on_vllm(vllm_exec, monkeypatch, flavour, wanted) -> None:
    monkeypatch.setenv("SPECTOOL_VLLM_FLAVOUR", flavour)
    with pytest.raises(Started):
        _vllm()
    assert _flag(vllm_exec["cmd"], "--dtype") == wanted  # the default is auto
    with pytest.raises(Started):
        _vllm("--dtype", "auto")
    assert _flag(vllm_exec["cmd"], "--dtype") == wanted
    with pytest.raises(Started):
        _vllm("--dtype", "float16")  # control: an explicit dtype is passed as given
    assert _flag(vllm_exec["cmd"], "--dtype") == "float16"


@pytest.mark.parametrize(("device", "wanted"), [("cuda", "bfloat16"), ("cpu", "float32")])
def test_dtype_auto_is_bf16_on_a_gpu_on_torch(torch_build, device, wanted) -> None:
    with pytest.raises(Started):
        cli_main(["serve", "--device", device, "--port", _free_port()])
    assert torch_build["dtype"] == wanted and torch_build["device"] == device
    with pytest.raises(Started):
        cli_main(["serve", "--device", device, "--dtype", "auto", "--port", _free_port()])
    assert torch_build["dtype"] == wanted
    with pytest.raises(Started):  # control: the torch defaults of the torch-only flags
        cli_main(["serve", "--port", _free_port()])
    assert (
        torch_build["device"],
        torch_build["max_batch"],
        torch_build["kv_slots"],
        torch_build["decoding"],
    ) == (
        "cpu",
        16,
        65536,
        "off",
    )


@pytest.mark.parametrize(
    ("flag", "equivalent"),
    [
        (["--max-batch", "8"], "--max-num-seqs"),
        (["--kv-slots", "4096"], "VLLM_CPU_KVCACHE_SPACE"),
        (["--decoding", "unispec"], "--o2"),
        (["--device", "cuda:1"], "CUDA_VISIBLE_DEVICES"),
        (["--cuda-graphs", "off"], "--compile"),
    ],
)
def test_a_torch_only_flag_on_vllm_is_an_error_naming_the_equivalent(
    vllm_exec, capsys, flag, equivalent
) -> None:
    assert _vllm(*flag) == 1
    err = capsys.readouterr().err
    assert flag[0] in err and equivalent in err and "vLLM" in err
    assert not vllm_exec  # nothing was started


def test_no_tool_cache_turns_off_o2_and_o3_on_vllm(vllm_exec) -> None:
    with pytest.raises(Started):
        _vllm("--no-tool-cache")
    assert "--speculative-config" not in vllm_exec["cmd"]  # O2 off
    assert vllm_exec["env"]["SPECTOOL_VLLM_O3"] == "0"  # O3 off
    with pytest.raises(Started):
        _vllm("--o2", "on")  # control: both on without the flag
    assert "--speculative-config" in vllm_exec["cmd"]
    assert vllm_exec["env"].get("SPECTOOL_VLLM_O3", "1") != "0"


def test_one_default_max_tokens_on_both_backends(monkeypatch) -> None:
    from spectool.settings import settings
    from spectool_serving.requests import _params
    from spectool_serving.schemas import ChatCompletionRequest
    from spectool_serving.vllm.serve import DEFAULT_MAX_TOKENS

    monkeypatch.delenv("SPECTOOL_VLLM_DEFAULT_MAX_TOKENS", raising=False)
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    torch_default = _params(body, 32768).max_tokens
    assert settings().vllm_default_max_tokens == DEFAULT_MAX_TOKENS == torch_default
