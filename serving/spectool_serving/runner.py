"""The model runner: the only code that calls the model.

Two entry points, both under ``torch.inference_mode``:

* :meth:`Runner.prefill` — one sequence's tokens into a fresh batch-1 cache.
* :meth:`Runner.forward` — new tokens for every row of a batched cache, with explicit
  ``position_ids`` [B, G] and an additive ``attention_mask`` [B, 1, G, C+G] (general enough
  for linear drafts, O3 appends and tree verification alike).

Llama-architecture models run both through :mod:`.backends.lean` (the same maths as
transformers' modules with far less per-operator overhead); others through the model's own
forward. In fp32 the lean forward's GEMMs run on :mod:`.backends.kernels`'s panel kernel where it
builds (one extra weight copy serves every row count), and otherwise on the model's own
weights: MKL's packed alternative needs a copy per row count, gigabytes for the few tokens per
row an engine step verifies.

On a CUDA device (``graphs="auto"``) the one-token decode step of a lean model is replayed
from CUDA graphs captured per batch bucket (:mod:`.graphs`); every other forward, and any
step the graphs decline, runs as above. ``graphs="off"`` never captures; ``"static"`` runs the
captured step's code without capture, on any device (what a CPU can check of it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from spectool.errors import ConfigError
from spectool.hf_compat import cache_keyword, output_cache

__all__ = ["GRAPH_MODES", "Runner"]

GRAPH_MODES = ("auto", "off", "static")


@dataclass
class Runner:
    model: Any
    device: str = "cpu"
    graphs: str = "auto"  # auto | off | static (see the module's docstring)
    graph_widths: tuple[int, ...] = (1,)  # step widths captured (tree sizes too, where that pays)

    def __post_init__(self) -> None:
        if self.graphs not in GRAPH_MODES:
            raise ConfigError(f"graphs must be one of {', '.join(GRAPH_MODES)}; got {self.graphs!r}")
        self._graphs: Any = None
        self._graphs_built = False
        self._last_prefill: tuple[tuple, torch.Tensor, Any] | None = None

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def window(self) -> int | None:
        """The sliding-attention window where the model has sliding layers (Gemma 3), else
        None: :meth:`.kv.BatchKV.step_inputs` then builds a mask per layer type."""
        cfg = getattr(self.model, "config", None)
        types = getattr(cfg, "layer_types", None) or []
        return getattr(cfg, "sliding_window", None) if "sliding_attention" in types else None

    def prefill(self, token_ids: list[int], keep: int = 1) -> tuple[torch.Tensor, Any]:
        """token_ids [L] -> (logits in fp32 on the model's device, batch-1 DynamicCache): of
        the last token [V], or with ``keep`` > 1 of the last ``keep`` tokens [keep', V].

        The same tokens prefilled again before the next :meth:`forward` (the ``n`` choices of
        one request, admitted together) share the first result: the cache's layers are new
        objects over the same tensors, which nobody writes in place (appends make new ones,
        :meth:`.kv.BatchKV.join` copies), so no choice sees another's growth."""
        key = (tuple(token_ids), keep)
        if self._last_prefill is not None and self._last_prefill[0] == key:
            _, logits, cache = self._last_prefill
            return logits.clone(), _share(cache)
        logits, cache = self._prefill(token_ids, keep)
        self._last_prefill = (key, logits, _share(cache))
        return logits, cache

    def _prefill(self, token_ids: list[int], keep: int) -> tuple[torch.Tensor, Any]:
        from transformers import DynamicCache

        cache = DynamicCache()
        lean = self._lean()
        with torch.inference_mode():
            if lean is not None:
                ids = torch.tensor([token_ids], device=self.device)
                n = len(token_ids)
                keep_mask = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
                mask = torch.zeros(n, n, dtype=self.dtype, device=self.device).masked_fill(
                    ~keep_mask, torch.finfo(self.dtype).min
                )[None, None]
                logits = lean(ids, torch.arange(n, device=self.device)[None], mask, cache, keep)
            else:
                out = self.model(
                    input_ids=torch.tensor([token_ids], device=self.device),
                    **{cache_keyword(self.model): cache},
                    use_cache=True,
                    logits_to_keep=keep,
                )
                logits, cache = out.logits, output_cache(out)
        return (logits[0, -1] if keep == 1 else logits[0]).float(), cache

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: Any, cache: Any
    ) -> torch.Tensor:
        """input_ids [B, G], position_ids [B, G], mask [B, 1, G, C+G] (or a dict of them by
        layer type) -> logits [B, G, V] fp32, on the model's device (the engine copies only
        the rows it samples from).

        The cache grows by G slots per row; the caller marks which of them stay valid.
        """
        self._last_prefill = None  # shared prefills live until the batch moves on
        graphs = self.decode_graphs()
        if graphs is not None:
            with torch.inference_mode():
                logits = graphs.run(input_ids, position_ids, attention_mask, cache)
            if logits is not None:
                return logits
        lean = self._lean()
        if isinstance(attention_mask, dict):
            mask = {k: v.to(self.device) for k, v in attention_mask.items()}
        else:
            mask = attention_mask.to(self.device)
        with torch.inference_mode():
            if lean is not None:
                logits = lean(input_ids.to(self.device), position_ids.to(self.device), mask, cache)
                return logits.float()
            out = self.model(
                input_ids=input_ids.to(self.device),
                position_ids=position_ids.to(self.device),
                attention_mask=mask,
                **{cache_keyword(self.model): cache},
                use_cache=True,
            )
        return out.logits.float()

    def decode_graphs(self) -> Any:
        """The :class:`.graphs.DecodeGraphs` of this runner (built on first use), or None: off,
        on a CPU under ``auto`` (its C kernels stay), or a model the lean forward does not run."""
        if not self._graphs_built:
            self._graphs_built = True
            from .backends import layer_ops, lean_for

            on_cuda = torch.device(self.device).type == "cuda"
            wanted = self.graphs == "static" or (self.graphs == "auto" and on_cuda)
            lean = lean_for(self.model, packed=False) if wanted else None  # torch's GEMMs
            if lean is not None:
                from .graphs import DecodeGraphs

                self._graphs = DecodeGraphs(
                    lean,
                    self.device,
                    capture=self.graphs == "auto",
                    ops=layer_ops(self.device),
                    widths=self.graph_widths,
                )
        return self._graphs

    def close(self) -> None:
        """Free the captured graphs and their memory pool (the engine's shutdown)."""
        if self._graphs is not None:
            self._graphs.close()
            self._graphs = None
        self._graphs_built = False  # a restarted engine captures afresh

    def _lean(self) -> Any:
        """The lean forward; the C kernels are asked for only on a CPU, so they never decide
        (or even build) for a model on another device."""
        from .backends import kernels, lean_for

        on_cpu = torch.device(self.device).type == "cpu"
        return lean_for(self.model, packed=on_cpu and kernels.available())


def _share(cache: Any) -> Any:
    """A cache whose layer objects are new but hold the same key/value tensors."""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    return twin
