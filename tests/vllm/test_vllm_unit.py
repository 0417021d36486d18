"""The vLLM plugin's pure parts (no vLLM needed): id mapping, mirror, version gate, command."""

from __future__ import annotations

import json
import time

import pytest

from spectool import ConfigError
from spectool_serving.vllm._compat import check_vllm_version, response_id_of
from spectool_serving.vllm._mirror import DraftMirror, ProposerCounters
from spectool_serving.vllm.serve import build_command, server_env


def test_internal_ids_map_back_to_the_response_id():
    assert response_id_of("chatcmpl-abc123-1a2B3c4D") == "chatcmpl-abc123"
    assert response_id_of("chatcmpl-abc123.h2-1a2B3c4D") == "chatcmpl-abc123.h2"  # an O3 hop: its own id
    assert response_id_of("chatcmpl-my-own-id-zzzzzzzz") == "chatcmpl-my-own-id"
    assert response_id_of("plain") == "plain"


def test_mirror_newest_first_dedup_expiry_and_bounds():
    now = [100.0]
    m = DraftMirror(max_responses=2, max_entries=2, clock=lambda: now[0])
    for r in ("r1", "r2", "r3"):
        m.put(("t", r), "f", "{}", 999)  # not open yet: taken by no scope
    assert len(m) == 0
    m.open(("t", "r1"), ["r1"])
    m.put(("t", "r1"), "f", '{"a": 1}', 200)
    m.put(("t", "r1"), "g", '{"b": 2}', 150)
    m.put(("t", "r1"), "f", '{"a": 1}', 300)  # re-post moves to the front, no duplicate
    assert m.entries("r1") == [("f", '{"a": 1}'), ("g", '{"b": 2}')]
    now[0] = 160
    assert m.entries("r1") == [("f", '{"a": 1}')]
    for r in ("r2", "r3"):
        m.open(("t", r), [r])
        m.put(("t", r), "f", "{}", 999)  # r3 evicts the oldest response
    assert m.entries("r1") == [] and len(m) == 2
    m.drop(("t", "r2"))
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


def test_the_stock_arm_is_the_same_server_without_any_spectool_piece(tmp_path):
    """The overhead bench's control: identical flags, no extension, no proposer, no plugin."""
    from spectool_bench.vllm._overhead import arm_command

    folder = tmp_path / "m"
    folder.mkdir()
    stock = build_command(str(folder), port=9, python="py", o2=False, spectool_plugins=False)
    ours = build_command(str(folder), port=9, python="py")
    assert "--worker-extension-cls" not in stock and "--speculative-config" not in stock
    shared = [a for a in ours if "spectool" not in a.lower() and "ToolCache" not in a]
    assert [a for a in stock if a in shared] == [a for a in shared if a in stock]  # same order
    assert set(stock) <= set(ours)
    with pytest.raises(ValueError, match="O2 is a spectool plugin"):
        build_command(str(folder), python="py", spectool_plugins=False)
    assert server_env({"VLLM_PLUGINS": "spectool"}, plugins=False)["VLLM_PLUGINS"] == ""
    cmd, env = arm_command("stock", port=9, dtype="bfloat16", model=str(folder))
    assert "--worker-extension-cls" not in cmd and env["VLLM_PLUGINS"] == ""
    cmd, env = arm_command("spectool", port=9, dtype="bfloat16", model=str(folder))
    assert "--speculative-config" in cmd and "spectool" in env["VLLM_PLUGINS"].split(",")


def test_overhead_summary_pairs_the_arms_per_stream_count():
    from spectool_bench.vllm._overhead import summarize

    samples = [
        {"arm": "stock", "streams": 8, "tok_s": 100.0, "ttft_median_s": 0.5},
        {"arm": "stock", "streams": 8, "tok_s": 110.0, "ttft_median_s": 0.7},
        {"arm": "spectool", "streams": 8, "tok_s": 99.0, "ttft_median_s": 0.6},
        {"arm": "spectool", "streams": 8, "tok_s": 103.0, "ttft_median_s": 0.6},
    ]
    (row,) = summarize(samples)
    assert row["stock_tok_s"] == 105.0 and row["spectool_tok_s"] == 101.0
    assert row["tok_s_ratio"] == pytest.approx(101 / 105) and row["ttft_ratio"] == pytest.approx(1.0)


def test_ngram_arm_is_stock_vllm_with_its_own_proposer_and_its_summary(tmp_path):
    from spectool_bench.vllm._ngram import summarize
    from spectool_bench.vllm._overhead import NGRAM, arm_command

    cmd, env = arm_command("ngram", port=9, dtype="float32", model=str(tmp_path))
    assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == NGRAM
    assert "--worker-extension-cls" not in cmd and env["VLLM_PLUGINS"] == ""
    with pytest.raises(ValueError, match="arm must be one of"):
        arm_command("eagle", port=9, dtype="float32", model=str(tmp_path))
    rows = [
        {"category": "code", "ar": {"tok_s": 10.0}, "ngram": {"tok_s": 20.0}, "identical": True},
        {"category": "code", "ar": {"tok_s": 10.0}, "ngram": {"tok_s": 10.0}, "identical": True},
        {"category": "chat", "ar": {"tok_s": 10.0}, "ngram": {"tok_s": 6.0}, "identical": False},
    ]
    s = summarize(rows)
    assert s["per_category"] == {"code": 1.5, "chat": 0.6}
    assert s["geomean"] == pytest.approx((1.5 * 0.6) ** 0.5) and s["identical"] is False
    assert "decode_phase_geomean" not in s  # rows from before streaming carry no phase
    for r, (ar, ng) in zip(rows, [(10.0, 40.0), (10.0, 20.0), (10.0, 5.0)]):
        r["ar"]["decode_tok_s"], r["ngram"]["decode_tok_s"] = ar, ng
    s = summarize(rows)
    assert s["decode_phase_per_category"] == {"code": 3.0, "chat": 0.5}
    assert s["decode_phase_geomean"] == pytest.approx((3.0 * 0.5) ** 0.5)


def test_both_benches_start_their_arms_one_by_one_and_close_them_all(tmp_path, monkeypatch):
    """start_arms (shared by the overhead and n-gram benches) with a fake server: a real one
    is a vLLM process (minutes); the fake has VllmServer's constructor and context protocol."""
    from contextlib import ExitStack

    import spectool_serving.vllm.serve as serve
    from spectool_bench.vllm._overhead import start_arms

    events: list[tuple[str, str]] = []

    class FakeServer:
        def __init__(self, cmd, *, port, env, log_path, start_timeout) -> None:
            self.cmd, self.url, self.log = cmd, f"http://127.0.0.1:{port}", log_path

        def __enter__(self):
            events.append(("up", self.log))
            return self

        def __exit__(self, *exc) -> None:
            events.append(("down", self.log))

    monkeypatch.setattr(serve, "VllmServer", FakeServer)
    said: list[str] = []
    with ExitStack() as stack:
        urls = start_arms(
            stack, {"ar": "stock", "ngram": "ngram"}, dtype="float32", out=tmp_path, say=said.append
        )
        assert list(urls) == ["ar", "ngram"] and len(set(urls.values())) == 2
        assert [e for e, _ in events] == ["up", "up"]
    logs = [str(tmp_path / "ar-server.log"), str(tmp_path / "ngram-server.log")]
    assert events == [("up", logs[0]), ("up", logs[1]), ("down", logs[1]), ("down", logs[0])]
    assert "--speculative-config" in said[1] and "--speculative-config" not in said[0]


class _CharTokenizer:
    """One token per character: drafts and model output compare as text (a fake; the real
    proposer loads the served model's tokenizer, which needs its files)."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


def test_proposer_counts_tool_acceptance_and_keeps_what_the_model_wrote_instead(monkeypatch):
    import types

    import numpy as np

    from spectool_serving.vllm import proposer as mod

    monkeypatch.setattr(mod, "_load_tokenizer", lambda cfg: _CharTokenizer())
    monkeypatch.setattr(mod, "_make_fallback", lambda cfg, spec: None)
    p = mod.ToolCacheProposer(
        types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=8))
    )
    prompt = "Q?"
    written = prompt + '<tool_call>\n{"name": "get_weather", "arguments": '
    batch = types.SimpleNamespace(req_ids=["chatcmpl-r1"], num_prompt_tokens=[len(prompt)])
    p.attach(types.SimpleNamespace(input_batch=batch), "chatml")
    p.mirror.open(("tag", "chatcmpl-r1"), ["chatcmpl-r1"])
    p.mirror.put(("tag", "chatcmpl-r1"), "get_weather", '{"city": "Paris"}', expires=2e9)

    def step(text, sampled):
        ids = np.zeros((1, 256), dtype=np.int64)
        ids[0, : len(text)] = [ord(c) for c in text]
        return p.propose([sampled], np.array([len(text)]), ids)

    draft = step(written, [ord(" ")])[0]
    assert "".join(map(chr, draft)) == '{"city":'  # the cached call's next 8 tokens
    # the model takes 2 of them, then writes its own ' ' instead of 'c'; the text no longer
    # continues the cached call, so nothing more is drafted
    assert step(written + '{" ', [ord(c) for c in '{" '])[0] == []
    counters = p.counters.as_dict("tag")
    assert (counters["tool_proposed"], counters["tool_accepted"]) == (8, 2)
    assert counters["tool_rejections"] == [{"drafted": '{"city":', "wrote": '{" '}]
    assert p.counters.as_dict("another tenant")["tool_rejections"] == []
    json.dumps(counters)  # served as JSON by /spectool/stats


def test_o2_counts_and_rejections_read_either_backend():
    import httpx

    from spectool_bench.vllm._workload import o2_counts, o2_rejections

    def vllm(request):
        o2 = {"tool_proposed": 9, "tool_accepted": 7, "tool_rejections": [{"drafted": "a", "wrote": "b"}]}
        return httpx.Response(200, json={"o2": [o2]})

    def torch_engine(request):
        if request.url.path == "/metrics":
            return httpx.Response(
                200, text="spectool_engine_o2_drafted_total 5.0\nspectool_engine_o2_accepted_total 5.0\n"
            )
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(vllm), base_url="http://x") as c:
        assert o2_counts(c) == {"tool_proposed": 9, "tool_accepted": 7}
        assert o2_rejections(c) == [{"drafted": "a", "wrote": "b"}]
    with httpx.Client(transport=httpx.MockTransport(torch_engine), base_url="http://x") as c:
        assert o2_counts(c) == {"tool_proposed": 5, "tool_accepted": 5}
        assert o2_rejections(c) == []


def test_the_no_o2_arm_loads_the_plugins_without_a_speculative_path(tmp_path):
    """The third overhead arm separates what the plugins cost from what O2's speculative path
    costs: plugins and worker extension on, no --speculative-config."""
    from spectool_bench.vllm._overhead import arm_command, summarize, table

    cmd, env = arm_command("no-o2", port=9, dtype="bfloat16", model=str(tmp_path))
    assert "--speculative-config" not in cmd and "--worker-extension-cls" in cmd
    assert "spectool" in env["VLLM_PLUGINS"].split(",")
    samples = [
        {"arm": arm, "streams": 1, "tok_s": tok_s, "ttft_median_s": 0.1}
        for arm, tok_s in (("stock", 50.0), ("spectool", 45.0), ("no-o2", 49.0))
    ]
    (row,) = summarize(samples)
    assert row["tok_s_ratio"] == pytest.approx(0.9) and row["no-o2_tok_s_ratio"] == pytest.approx(0.98)
    assert "plugins, O2 off" in table([row])


def test_the_overhead_bench_prints_the_tax_as_serve_takes_it():
    """``--o2 auto`` on another machine uses that machine's bench: the printed pairs parse."""
    from spectool_bench.vllm._overhead import summarize, tax_arg
    from spectool_serving.vllm._o2choice import TaxPoint, parse_tax

    samples = [
        {"arm": arm, "streams": n, "tok_s": tok_s * n, "ttft_median_s": 0.1}
        for n, ratio in ((1, 0.95), (8, 0.9))
        for arm, tok_s in (("stock", 50.0), ("spectool", 50.0 * ratio))
    ]
    assert parse_tax(tax_arg(summarize(samples))) == (TaxPoint(1, 0.95), TaxPoint(8, 0.9))


def test_proposer_does_no_per_row_work_while_nothing_is_cached(monkeypatch):
    """O2's cost when nothing hits: no row lookup, no decode, until an entry is posted."""
    import types

    import numpy as np

    from spectool_serving.vllm import proposer as mod

    tok = _CharTokenizer()
    decoded: list = []
    monkeypatch.setattr(
        tok, "decode", lambda ids: decoded.append(ids) or "".join(map(chr, ids)), raising=False
    )
    monkeypatch.setattr(mod, "_load_tokenizer", lambda cfg: tok)
    monkeypatch.setattr(mod, "_make_fallback", lambda cfg, spec: None)
    p = mod.ToolCacheProposer(
        types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=8))
    )

    class Batch:  # counts reads of the row -> request id map
        reads = 0
        num_prompt_tokens = [2, 2]

        @property
        def req_ids(self):
            Batch.reads += 1
            return ["chatcmpl-r1", "chatcmpl-r2"]

    p.attach(types.SimpleNamespace(input_batch=Batch()), "chatml")
    p.mirror.open(("tag", "chatcmpl-r1"), ["chatcmpl-r1"])  # open responses, nothing posted
    text = 'Q?<tool_call>\n{"name": "get_weather", "arguments": '
    ids = np.zeros((2, 256), dtype=np.int64)
    ids[:, : len(text)] = [ord(c) for c in text]
    lengths = np.array([len(text), len(text)])
    assert p.propose([[32], [32]], lengths, ids) == [[], []]
    assert Batch.reads == 0 and decoded == []
    # negative control: once an entry is posted, the same step reads rows and drafts
    p.mirror.put(("tag", "chatcmpl-r1"), "get_weather", '{"city": "Paris"}', expires=2e9)
    drafts = p.propose([[32], [32]], lengths, ids)
    assert Batch.reads >= 1 and decoded and "".join(map(chr, drafts[0])) == '{"city":' and drafts[1] == []


def test_a_vllm_environment_without_the_setup_stamp_is_incomplete(tmp_path, monkeypatch):
    """setup-vllm.sh writes its stamp last; a venv it left part-way (a full disk, a registry
    failure) must not be started as if it were whole."""
    from spectool_serving.vllm import serve

    monkeypatch.delenv("SPECTOOL_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(serve, "ROOT", tmp_path)
    assert "no vLLM environment" in (serve.vllm_env_missing() or "")
    (tmp_path / ".venv-vllm" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-vllm" / "bin" / "python").touch()
    assert "incomplete" in (serve.vllm_env_missing() or "")
    (tmp_path / ".venv-vllm" / ".spectool-setup").write_text("stamp\n")
    assert serve.vllm_env_missing() is None


def test_ngram_decode_once_reads_a_stream_with_its_first_token_time():
    """A local stand-in for vLLM's streamed chat completion (the real one is a vLLM process):
    the same SSE lines, logprobs per chunk, usage in the last chunk."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from spectool_bench.vllm._ngram import decode_once

    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.update(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def send(obj):
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()

            send({"choices": [{"delta": {"role": "assistant"}, "logprobs": None}]})
            send({"choices": [{"delta": {"content": "a"}, "logprobs": {"content": [{"token": "a"}]}}]})
            time.sleep(0.2)  # the decode phase
            lp = {"content": [{"token": "b"}, {"token": "c"}]}
            send({"choices": [{"delta": {"content": "bc"}, "logprobs": lp}]})
            send({"choices": [], "usage": {"completion_tokens": 3}})
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = decode_once(f"http://127.0.0.1:{server.server_port}", [{"role": "user", "content": "x"}], 8)
    finally:
        server.shutdown()
    assert seen["stream"] is True and seen["stream_options"] == {"include_usage": True}
    assert got["tokens"] == ["a", "b", "c"] and got["generated"] == 3
    assert (
        got["ttft_s"] < 0.2 <= got["decode_s"] + 0.01
        and got["secs"] >= got["ttft_s"] + got["decode_s"] - 1e-6
    )
    assert got["decode_tok_s"] == pytest.approx(2 / got["decode_s"])
