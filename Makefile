# The two commands of the README. Both build .venv/ first (scripts/setup.sh is idempotent).
.PHONY: setup bench test

setup:
	bash scripts/setup.sh

bench: setup
	.venv/bin/spectool bench --quick --out bench-out

test: setup
	.venv/bin/python -m pytest -q
