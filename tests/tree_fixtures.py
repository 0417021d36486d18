"""Shared by the model tests: tiny random models (Llama, Qwen2, Gemma 3), the gate for tests of
the C kernels, and a lying verifier, the negative control of the lossless checks."""

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


_FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
}


#: The tiny random models' sizes where a call does not choose others.
_SIZES = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2)


def tiny_model(family: str, heads: int, kv_heads: int, *, seed: int = 0, attn: str | None = "sdpa", **config):
    """A random ``family`` model (llama, qwen2 or gemma3) of a tiny shape, in eval mode:
    ``heads`` query heads over ``kv_heads``, 256 positions; ``config`` sets more config fields
    (or other sizes), ``attn=None`` keeps the family's own attention choice."""
    import transformers

    config_class, model_class = (getattr(transformers, name) for name in _FAMILIES[family])
    torch.manual_seed(seed)
    heads_ = {"num_attention_heads": heads, "num_key_value_heads": kv_heads}
    cfg = config_class(**{"max_position_embeddings": 256, **_SIZES, **heads_, **config})
    if attn is not None:
        cfg._attn_implementation = attn
    return model_class(cfg).eval()


def tiny_llama(heads: int, kv_heads: int, *, seed: int, hidden: int = 48, bias: bool = False, **extra):
    """A 3-layer random Llama (vocabulary 97) with SDPA attention, in eval mode."""
    sizes = dict(hidden_size=hidden, num_hidden_layers=3)
    return tiny_model("llama", heads, kv_heads, seed=seed, attention_bias=bias, **sizes, **extra)


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


def lie_in_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch the engine's forward so that verification vouches for every drafted child (its
    logits pushed to the child's token at its parent): the negative control of each lossless
    check, whose outputs then differ from plain decoding."""
    from spectool_serving.engine import Engine

    real = Engine._run

    def lying(self, plan):
        logits, t = real(self, plan)
        logits = logits.clone()  # inference tensors are read-only
        for b, row in enumerate(plan.rows):
            tree = row.tree
            for i in range(1, len(tree) if tree is not None else 0):
                logits[b, tree.parents[i], tree.tokens[i]] = torch.finfo(logits.dtype).max
        return logits, t

    monkeypatch.setattr(Engine, "_run", lying)
