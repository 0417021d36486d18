"""The main model's backends measured: torch engine vs vLLM (rates, the choice `--backend auto` makes),
the embedded main model server, the tree-forward kernels."""
