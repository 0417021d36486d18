"""The vLLM plugin's pure parts (no vLLM needed): id mapping, mirror, version gate, command."""

from __future__ import annotations

import json

import pytest

from spectool import ConfigError
from spectool_serving.vllm._compat import check_vllm_version, response_id_of
from spectool_serving.vllm._mirror import DraftMirror, ProposerCounters
from spectool_serving.vllm.serve import build_command, server_env


def test_internal_ids_map_back_to_the_response_id():
    assert response_id_of("chatcmpl-abc123-1a2B3c4D") == "chatcmpl-abc123"
    assert response_id_of("chatcmpl-abc123.h2-1a2B3c4D") == "chatcmpl-abc123"  # an O3 hop
    assert response_id_of("chatcmpl-my-own-id-zzzzzzzz") == "chatcmpl-my-own-id"
    assert response_id_of("plain") == "plain"


def test_mirror_newest_first_dedup_expiry_and_bounds():
    now = [100.0]
    m = DraftMirror(max_responses=2, max_entries=2, clock=lambda: now[0])
    m.put("r1", "f", '{"a": 1}', 200)
    m.put("r1", "g", '{"b": 2}', 150)
    m.put("r1", "f", '{"a": 1}', 300)  # re-post moves to the front, no duplicate
    assert m.entries("r1") == [("f", '{"a": 1}'), ("g", '{"b": 2}')]
    now[0] = 160
    assert m.entries("r1") == [("f", '{"a": 1}')]
    m.put("r2", "f", "{}", 999)
    m.put("r3", "f", "{}", 999)  # evicts the oldest response
    assert m.entries("r1") == [] and len(m) == 2
    m.drop("r2")
    assert m.entries("r2") == []


def test_counters_report_tool_and_text_acceptance_apart():
    c = ProposerCounters(tool_proposed=10, tool_accepted=9, text_proposed=4, text_accepted=1)
    d = c.as_dict()
    assert d["tool_acceptance"] == 0.9 and d["text_acceptance"] == 0.25
    assert ProposerCounters().as_dict()["tool_acceptance"] is None


def test_version_gate(monkeypatch):
    monkeypatch.delenv("SPECTOOL_VLLM_ALLOW_ANY_VERSION", raising=False)
    assert check_vllm_version("0.32.0") == "0.32.0"
    assert check_vllm_version("0.33.1+cpu") == "0.33.1+cpu"
    with pytest.raises(ConfigError, match="supports vllm"):
        check_vllm_version("0.40.0")
    monkeypatch.setenv("SPECTOOL_VLLM_ALLOW_ANY_VERSION", "1")
    assert check_vllm_version("0.40.0") == "0.40.0"


def test_command_loads_every_plugin_piece(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    cmd = build_command(str(folder), port=9, python="py", tool_parser="xlam")
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec["method"] == "custom_class" and spec["model"].endswith("ToolCacheProposer")
    assert cmd[cmd.index("--worker-extension-cls") + 1].endswith("ToolCacheWorkerExtension")
    assert cmd[cmd.index("--tool-call-parser") + 1] == "xlam" and "--chat-template" not in cmd
    assert "--speculative-config" not in build_command(str(folder), python="py", o2=False)
    env = server_env({"VLLM_PLUGINS": "other"})
    assert env["VLLM_PLUGINS"] == "other,spectool" and env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
