"""Shared by the tree tests: tiny random Llamas and the gate for tests of the C kernels."""

from __future__ import annotations

import shutil

import pytest
import torch

from spectool_serving.backends import kernels

# Only a machine that cannot run the kernels at all skips; on one that can, unavailability fails.
_compiler = shutil.which("cc") or shutil.which("gcc")
needs_kernel = pytest.mark.skipif(
    not (kernels._cpu_has("avx512f") and (kernels._installed() or _compiler)),
    reason="no AVX-512 CPU, or neither an installed kernel library nor a C compiler",
)
# the first-use build into the cache (the fallback when no install-time library is there)
needs_compiler = pytest.mark.skipif(
    not (kernels._cpu_has("avx512f") and _compiler), reason="no AVX-512 CPU or no C compiler"
)


def tiny_llama(heads: int, kv_heads: int, *, seed: int, hidden: int = 48, bias: bool = False, **extra):
    """A 3-layer random Llama (vocabulary 97) with SDPA attention, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=hidden,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        attention_bias=bias,
        max_position_embeddings=256,
        **extra,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval()


#: The tiny random models' shape (2 layers, 4 heads over 2 KV heads), shared by every family.
TINY_SHAPE = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def tiny_llama_for(tokenizer, *, seed: int, max_positions: int = 1024):
    """A 2-layer random Llama over a real tokenizer's vocabulary (SDPA, eval mode): for tests of
    code around a model (parsing, grammar, store, decode loop) that do not depend on what it says."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        **TINY_SHAPE,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval()


def embedded_tokenizer():
    """The embedded model's tokenizer (files only, no weights) and its prompt format."""
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder
    from spectool_serving.toolcalls import detect_format

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))
    return tok, detect_format(getattr(tok, "chat_template", None), "")


def looping_llama(tokenizer, *, seed: int, words: int = 97):
    """:func:`tiny_llama_for` that only ever writes ``words`` ordinary tokens (the other rows of
    its output projection zeroed): a random model over a small alphabet soon repeats itself, so
    tree drafts (suffix matches, the n-gram store) are accepted and losslessness is tested on
    steps that accept drafts, not only on steps that reject them."""
    model = tiny_llama_for(tokenizer, seed=seed)
    with torch.no_grad():
        keep = torch.zeros(model.config.vocab_size, dtype=torch.bool)
        keep[1000 : 1000 + words] = True
        model.lm_head.weight[~keep] = 0.0
        model.lm_head.weight[keep] *= 4.0
    return model
