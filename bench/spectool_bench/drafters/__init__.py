"""`spectool drafters`: drafters evaluated offline on BFCL ground truth (accuracy, speed, the tuned
adapter, the prompt check), and the `tune` subcommand."""
