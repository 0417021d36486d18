"""scripts/gpu-check.sh cannot rot: its --dry-run (the same checks on the CPU, tiny random
models, the embedded model's tokenizer) runs here and must pass every check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model  # the embedded model's tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _gpu_check():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check

        return gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_dry_run_passes_every_check(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # 3.4 min measured on 2 busy cores
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")
    rows = json.loads(out.read_text())
    kinds = {r["check"] for r in rows}
    assert kinds == {"greedy", "throughput", "tree", "o2o3", "floor", "step", "drafter"}
    # the correctness checks ran the captured step's code (uncaptured on the CPU), no fallback
    for r in rows:
        if r["check"] in ("greedy", "throughput", "o2o3"):
            assert r["graphs"]["replayed"] > 0 and r["graphs"]["fallback"] is None, r
    steps = [r for r in rows if r["check"] == "step"]
    assert sorted((r["graphs"], r["streams"]) for r in steps) == [
        ("off", 1),
        ("off", 2),
        ("on", 1),
        ("on", 2),
    ]
    assert all(r["replayed"] > 0 and r["eager_steps"] == 0 for r in steps if r["graphs"] == "on")
    assert all(r["replayed"] == 0 and r["decode_ms_per_step"] > 0 for r in steps if r["graphs"] == "off")
    tree = [r for r in rows if r["check"] == "tree"]
    assert {r["tree_steps"] for r in tree} == {"eager", "captured"} and all(r["identical"] for r in tree)
    assert [r["samples"] for r in rows if r["check"] == "drafter"] == [1, 3]
    assert all(r["ms_per_step"] > 0 for r in rows if r["check"] == "floor")
    greedy = [r for r in rows if r["check"] == "greedy"]
    assert {r["dtype"] for r in greedy} == {"float32", "bfloat16"}
    assert all(r["identical"] == r["prompts"] for r in greedy)  # tiny shapes: no ties expected
    assert [r["streams"] for r in rows if r["check"] == "throughput"] == [1, 2]
    assert all(r["engine_tok_s"] > 0 and r["hf_tok_s"] > 0 for r in rows if r["check"] == "throughput")
    o2o3 = [r for r in rows if r["check"] == "o2o3"][0]
    assert o2o3["o3_hits"] == 1 and o2o3["o2_accepted"] > 0 and o2o3["same_transcript"]


def test_compare_calls_a_divergence_a_tie_only_at_a_near_tie():
    """The greedy check's verdicts, and their negative controls."""
    compare = _gpu_check().compare
    assert compare([1, 2, 3], [1, 2, 3], [1.0, 1.0, 1.0]) == "same"
    assert compare([1, 2, 4], [1, 2, 3], [1.0, 1.0, 1.0]) == "mismatch"
    assert compare([1, 2, 4], [1, 2, 3], [1.0, 1.0, 0.001]) == "tie"
    assert compare([1, 2], [1, 2, 3], [1.0, 1.0, 1.0]) == "mismatch"  # stopped early


def test_a_check_that_raises_is_a_failed_row_and_the_others_still_run(tmp_path, monkeypatch):
    """Device time is spent either way: one broken check must not hide the others' results
    (the first H200 run found two bugs this way, in tree and o2o3, beside greedy's)."""
    gpu_check = _gpu_check()

    def broken(*_args, **_kwargs):
        raise RuntimeError("view size is not compatible")

    monkeypatch.setattr(gpu_check, "check_tree", broken)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "rows.json"
    assert gpu_check.main(["--dry-run", "--out", str(out)]) == 1
    rows = json.loads(out.read_text())
    tree = [r for r in rows if r["check"] == "tree"]
    assert len(tree) == 1 and "view size" in tree[0]["error"] and "Traceback" in tree[0]["where"]
    assert any(r["check"] == "o2o3" and r["ok"] for r in rows)  # ran after the broken one


def test_bf16_ties_allow_two_units_in_the_last_place_and_no_more():
    """A batched bf16 GEMM rounds differently from a one-row one; fp32 gets no such slack."""
    import torch

    gpu_check = _gpu_check()
    assert gpu_check.ulp(3.0, torch.bfloat16) == 2.0**-6  # [2, 4): 7 mantissa bits
    assert gpu_check.ulp(3.0, torch.float32) == 0.0
    tie = 2 * gpu_check.ulp(3.0, torch.bfloat16)
    assert gpu_check.compare([1, 5], [1, 2], [1.0, tie], [0.02, tie]) == "tie"
    assert gpu_check.compare([1, 5], [1, 2], [1.0, 2 * tie], [0.02, tie]) == "mismatch"
