"""A Qwen2-family stand-in for the drafter tests: the real bases are 0.5–1.5 B parameters.

SmolLM2's tokenizer given Qwen2.5's chat template (``qwen2_5_chat_template.jinja``, copied from
the Qwen2.5-Coder-0.5B-Instruct GGUF) and its two tool-call tokens, and a seeded two-layer random
``Qwen2ForCausalLM`` (biased q/k/v projections, Qwen's architecture class) over that vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).with_name("qwen2_5_chat_template.jinja")


def qwen_style_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))
    tok.add_tokens(["<tool_call>", "</tool_call>"])  # not special, as in Qwen2.5's tokenizer
    tok.chat_template = TEMPLATE.read_text(encoding="utf-8")
    return tok


def tiny_qwen(tok: Any, *, seed: int) -> Any:
    """A fresh fp32 model in eval mode; the same seed gives the same weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    return Qwen2ForCausalLM(config).eval()
