# The two commands of the README. Both build .venv/ first (scripts/setup.sh is idempotent).
.PHONY: setup bench test

setup:
	bash scripts/setup.sh

# bench also builds .venv-vllm/ (scripts/setup-vllm.sh, idempotent) so --backend auto can measure
# both backends; if that fails the bench still runs, on the torch engine (it prints why).
bench: setup
	bash scripts/setup-vllm.sh || echo "make bench: vLLM set-up failed; the main job runs on the torch engine"
	.venv/bin/spectool bench --quick --out bench-out

test: setup
	.venv/bin/python -m pytest -q
