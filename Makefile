# The two commands of the README. Both build .venv/ first (scripts/setup.sh is idempotent).
.PHONY: setup bench test lint format

PY := .venv/bin/python

setup:
	bash scripts/setup.sh

# bench also builds .venv-vllm/ (scripts/setup-vllm.sh, idempotent) so --backend auto can measure
# both backends; if that fails the bench still runs, on the torch engine (it prints why).
bench: setup
	bash scripts/setup-vllm.sh || echo "make bench: vLLM set-up failed; the main job runs on the torch engine"
	.venv/bin/spectool bench --quick --out bench-out

# Static checks, each its own line so a failure names its tool: ruff (lint rules and format,
# pyproject [tool.ruff]), import-linter (the layers of docs/architecture.md, .importlinter),
# mypy (pyproject [tool.mypy]).
LINT_PATHS := spectool serving integrations bench tests scripts
lint: setup
	.venv/bin/ruff check $(LINT_PATHS)
	.venv/bin/ruff format --check $(LINT_PATHS)
	PYTHONPATH=.:serving:bench:scripts:integrations/langchain:integrations/mcp:integrations/openai_agents .venv/bin/lint-imports
	.venv/bin/mypy -p spectool -p spectool_serving -p spectool_bench

# Rewrites files: import order and pyupgrade fixes, then the formatter.
format: setup
	.venv/bin/ruff check --fix $(LINT_PATHS)
	.venv/bin/ruff format $(LINT_PATHS)

# The vLLM tests need .venv-vllm; building it here (idempotent) rather than inside a fixture
# puts a failed install at the end of the log, in pip's own words.
test: setup lint
	bash scripts/setup-vllm.sh
	$(PY) -m pytest -q --durations=15
