"""Figures for the serving engine's tool cache (`python -m spectool_bench.engine._figures`)."""
