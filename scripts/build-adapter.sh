#!/usr/bin/env bash
# Rebuild the shipped drafter adapter (spectool/drafters/data/adapter-smollm2-bfcl) from the
# TRAIN split of BFCL: traces from ground truth, then LoRA tuning of the embedded SmolLM2.
# The split is by content (spectool_bench.bfcl._splits): no test task, nor a copy of one under
# another id, is in the traces; the manifest lists every example's content digest.
# About 35 min on the 2-core AVX-512 reference machine, both cores (2 epochs: 610 steps of 4
# examples, bf16 autocast). Precision is auto: fp32 on a CPU without native bf16 (AVX2 only),
# where a step costs more and the 58-min cap may end it early (the manifest records the steps).
# On cores other jobs share, try --threads 1 (2026-11-26, load 6–7 on 2 cores: the first steps
# ran at 0.05 examples/s with two threads, 0.25 with one: two threads wait on each other).
# Usage: [CATEGORIES=a,b,…] scripts/build-adapter.sh [OUT_DIR] [extra `drafters tune` options…]
# CATEGORIES: the trace categories (BFCL, BFCL's training-only exec_* sets, tau2_<domain>);
# later options override the recipe's (e.g. --max-per-category 200 --epochs 1.5).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-spectool/drafters/data/adapter-smollm2-bfcl}
shift || true
py=${PYTHON:-.venv/bin/python}
categories=${CATEGORIES:-simple_python,multiple,live_simple,live_multiple,parallel,parallel_multiple,multi_turn_base}
traces=$(mktemp -t spectool-traces-XXXX.jsonl)
"$py" -m spectool_bench.workloads._traces --split train --speculable-only --first-step-only \
  --categories "$categories" --out "$traces"
"$py" -m spectool.drafters.tune --traces "$traces" --out "$out" \
  --max-per-category 300 --epochs 2 --rank 16 --lr 1e-3 --batch-size 4 --max-tokens 640 \
  --threads 2 --max-minutes 58 "$@"
gzip -nc "$traces" > "$out/traces.jsonl.gz" && rm -f "$traces"
