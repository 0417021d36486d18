"""Dependency chatter hidden while a model loads or converts.

transformers' FutureWarnings and progress bars (and the GGUF reader's own tqdm bar) are not the
user's to act on; they stay hidden unless the ``spectool`` logger is at DEBUG
(``spectool serve --log-level debug``).
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_loading", "quiet_peft_wrap"]


@contextmanager
def quiet_loading() -> Iterator[None]:
    """A context manager (and decorator) that quietens model loading."""
    if logging.getLogger("spectool").isEnabledFor(logging.DEBUG):
        yield
        return
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # nothing to quieten; the caller reports the missing extra
        yield
        return
    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), _no_gguf_bar():
            for module in ("transformers", "torch", "huggingface_hub", "gguf"):
                warnings.filterwarnings("ignore", category=FutureWarning, module=module)
                warnings.filterwarnings("ignore", category=UserWarning, module=module)
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


@contextmanager
def quiet_peft_wrap() -> Iterator[None]:
    """Around peft's wrapping of a model (tuning, loading an adapter).

    peft reads transformers' deprecated ``is_gradient_checkpointing`` whatever its caller does;
    only that one FutureWarning is dropped (by message), so nothing of the user's is hidden.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="`is_gradient_checkpointing` is deprecated",
            category=FutureWarning,
            module="transformers",
        )
        yield


@contextmanager
def _no_gguf_bar() -> Iterator[None]:
    # transformers' GGUF reader draws its bar with tqdm directly, past its own switch
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
