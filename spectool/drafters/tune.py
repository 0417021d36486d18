"""``spectool drafters tune``: LoRA-tune the local drafter on traces (public seam of
:mod:`spectool.drafters._tune`, which imports torch, transformers and peft on use)."""

from ._tune import add_arguments, run

__all__ = ["add_arguments", "run"]
