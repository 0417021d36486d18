"""``spectool soak --model tiny``: a randomly initialised 2-layer Llama of SmolLM2's
architecture, over SmolLM2's own tokenizer and chat template, written to a folder the engine
loads like any HF model.

What the soak checks (fault isolation, restarts, dropped streams, losslessness of engine-side
speculation) does not depend on what the model says: its calls are grammar-constrained
(``tool_choice="required"``) and its greedy output is deterministic for a fixed seed. A model
this size costs next to nothing a token where SmolLM2-135M takes tens of milliseconds on a CPU,
so a small soak fits a unit test's budget. The real model stays the soak's default.

A purely random model never ends a call: inside a grammar-constrained string its argmax is
rarely the closing quote, so every call runs into ``max_tokens`` and no tool ever runs. So the
output head gets a fixed lean towards the tokens that close JSON values (``"``, ``,``, ``}``,
``]``) and the end of message, on top of its random rows: one hidden dimension of every token
embedding is a constant, whose column of the (untied) head carries the lean. The other
dimensions stay random, so what the model writes still depends on its input.

Such a model writes no literal of the request (its numbers are all alike), so the history
drafter's fillings, taken from the request, never match its calls and the engine would resolve
none: :class:`ReplayDrafter` proposes what the reference pass's model called next in the same
conversation before the history drafter's proposals, so drafts hit and the resolve path runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from spectool import Drafter, DraftRequest, ToolCall

__all__ = ["TINY", "TINY_SHAPE", "ReplayDrafter", "tiny_model_folder"]

TINY = "tiny"

#: SmolLM2's architecture (Llama, GQA 3:1 → here 4 query heads over 2, tied embeddings) at a
#: size where a forward pass costs next to nothing.
TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}

#: the lean, in logits, towards tokens that close a JSON value or the message: random logits
#: have a standard deviation of about 1, so the largest of ~49k is about 4; the closing quote
#: leans most, as ``,`` ``}`` ``]`` are string content too
_LEANS = {'"': 7.0, ",": 5.0, "}": 5.0, "]": 5.0}

#: the tokenizer's and prompt format's files, copied from the embedded model's folder
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)


def tiny_model_folder(parent: Path, *, seed: int = 0) -> Path:
    """Write the tiny random model under ``parent`` (once; a folder already there is reused)
    and return its path. Same ``seed``, same weights, so the same greedy output."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from spectool.embedded import embedded_hf_folder

    folder = parent / "tiny-random-smollm2"
    if (folder / "model.safetensors").exists():
        return folder
    source = embedded_hf_folder()  # SmolLM2's config and tokenizer; its weights are not loaded
    config = LlamaConfig.from_pretrained(source)
    for key, value in TINY_SHAPE.items():
        setattr(config, key, value)
    config.tie_word_embeddings = False  # the head's lean column must not be the embeddings'
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    _lean(model, _closer_ids(source))
    folder.mkdir(parents=True, exist_ok=True)
    for name in _TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    model.save_pretrained(folder)  # model.safetensors last: its presence marks a whole folder
    return folder


def _closer_ids(source: Path) -> dict[int, float]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source)
    leans = {tok.convert_tokens_to_ids(t): v for t, v in _LEANS.items()}
    return {**leans, tok.eos_token_id: 5.0}


def _lean(model: object, leans: dict[int, float]) -> None:
    """Dimension 0 of every embedding a constant that dominates the residual stream, so after
    the final norm it is ≈ √hidden at every position; the head's column 0 turns it into a fixed
    logit bias (``leans`` by token id, 0 elsewhere). The other head columns are rescaled so the
    random, input-dependent logits have a standard deviation of about 1."""
    import torch

    m: Any = model
    hidden = m.config.hidden_size
    with torch.no_grad():
        m.model.embed_tokens.weight[:, 0] = 1.0
        head = m.lm_head.weight
        # after the norm, dimension d > 0 is ≈ embedding · √hidden: its logit sum over hidden − 1
        # dimensions has std ≈ head std · embedding std · hidden
        head[:, 1:] *= 1.0 / (head[:, 1:].std() * hidden * m.model.embed_tokens.weight[:, 1:].std())
        head[:, 0] = 0.0
        for token, lean in leans.items():
            head[token, 0] = lean / hidden**0.5


class ReplayDrafter:
    """Proposes the calls the reference pass's model made next in the same conversation (call
    ids aside), then ``inner``'s proposals: a drafter that is right whenever the soak pass
    follows the reference, as it must, so the engine's resolve path runs on every kind of call.
    A conversation the reference never saw gets ``inner``'s proposals only."""

    def __init__(self, known: dict[str, list[ToolCall]], inner: Drafter) -> None:
        self.known, self.inner = known, inner

    @classmethod
    def from_transcripts(cls, transcripts: list[list[dict[str, Any]]], inner: Drafter) -> ReplayDrafter:
        """From the reference pass's task transcripts (one message list per task)."""
        known: dict[str, list[ToolCall]] = {}
        for messages in transcripts:
            for i, m in enumerate(messages):
                calls = [c for c in map(_call, m.get("tool_calls") or ()) if c is not None]
                if m.get("role") == "assistant" and calls:
                    known.setdefault(_prefix_key(messages[:i]), calls)
        return cls(known, inner)

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        known = self.known.get(_prefix_key(request.messages), [])
        rest = [c for c in await self.inner.propose(request) if c not in known]
        return [*known, *rest][: max(request.samples, len(known))]


def _prefix_key(messages: Any) -> str:
    """A conversation without its call ids (they differ from pass to pass)."""
    return json.dumps(
        [
            [
                m.get("role"),
                m.get("content"),
                [(c.name, c.arguments) for c in map(_call, m.get("tool_calls") or ()) if c],
            ]
            for m in messages
        ],
        sort_keys=True,
        default=str,
    )


def _call(entry: Any) -> ToolCall | None:
    """A Chat Completions tool call entry as a :class:`ToolCall`; ``None`` if it is malformed."""
    try:
        fn = entry["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        return ToolCall(fn["name"], args) if isinstance(args, dict) else None
    except (KeyError, TypeError, ValueError):
        return None
