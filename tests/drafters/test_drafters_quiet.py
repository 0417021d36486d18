"""A draft, a tuning run and an adapter load print no dependency warnings, and hide none of the user's.

transformers 5 warns a FutureWarning on every forward given ``past_key_values`` (now ``cache``),
and peft reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a model; both
landed in the middle of ``make bench``. Each test records every warning (``always``) around the
real code on a tiny random Llama and warns one of its own inside the same block: that one must
come through (the control that the recording works and that nothing is filtered wholesale).
"""

from __future__ import annotations

import warnings

import pytest

from spectool import DraftRequest
from spectool._quiet import quiet_peft_wrap
from spectool.drafters import LocalDrafter
from spectool.hf_compat import cache_keyword
from tests.tree_fixtures import tiny_llama

from .conftest import add_tool, growing_conversation, tiny_llama_fixture, weather_tool

TOOLS = [weather_tool(), add_tool("string")]


class UsersOwnWarning(UserWarning):
    pass


def _foreign(caught: list[warnings.WarningMessage]) -> list[str]:
    return [f"{w.category.__name__}: {w.message}" for w in caught if w.category is not UsersOwnWarning]


def _mine(caught: list[warnings.WarningMessage]) -> int:
    return sum(w.category is UsersOwnWarning for w in caught)


tiny = tiny_llama_fixture(seed=7, float64=False)


@pytest.mark.anyio
async def test_a_local_draft_warns_nothing_of_its_dependencies(tiny):
    drafter = LocalDrafter(tiny)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for messages in growing_conversation():  # the first prefills, the later ones reuse the cache
            warnings.warn("the user's own", UsersOwnWarning, stacklevel=1)
            assert await drafter.propose(DraftRequest(messages, TOOLS, samples=2))
    assert drafter.last_stats is not None and drafter.last_stats.forwards > 0
    assert _foreign(caught) == []
    assert _mine(caught) == len(growing_conversation())


def test_the_cache_goes_under_the_name_the_models_forward_declares():
    class OldForward:  # the shape of a transformers < 5.x forward (not installed here)
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    class Wrapper:  # a peft model: its own forward takes **kwargs; the base model's counts
        def __init__(self, base) -> None:
            self.base = base

        def forward(self, **kwargs): ...

        def get_base_model(self):
            return self.base

    model = tiny_llama(4, 2, seed=0)
    assert cache_keyword(model) == "cache"
    assert cache_keyword(Wrapper(model)) == "cache"
    assert cache_keyword(OldForward()) == "past_key_values"
    assert cache_keyword(Wrapper(OldForward())) == "past_key_values"


def test_tuning_and_loading_an_adapter_warn_nothing_of_peft(tmp_path):
    from spectool.drafters.local._adapter import load_adapter
    from spectool.drafters.tune._tune import _lora, save_adapter

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = _lora(tiny_llama(4, 2, seed=0), 4, 8.0, 0.0)
        save_adapter(wrapped, tmp_path / "adapter", {"data": "none"})
        load_adapter(tiny_llama(4, 2, seed=0), tmp_path / "adapter")
        warnings.warn("the user's own", UsersOwnWarning, stacklevel=1)
    assert _foreign(caught) == []
    assert _mine(caught) == 1


def test_the_peft_quietening_drops_only_that_deprecation():
    model = tiny_llama(4, 2, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_peft_wrap():
            assert model.is_gradient_checkpointing is False  # transformers warns; dropped
            warnings.warn("the user's own", UsersOwnWarning, stacklevel=1)
            mine = "`is_gradient_checkpointing` is deprecated (the user's)"
            warnings.warn(mine, FutureWarning, stacklevel=1)
        assert model.is_gradient_checkpointing is False  # outside: transformers' warning shows
    assert _mine(caught) == 1
    future = [(str(w.message), w.filename) for w in caught if w.category is FutureWarning]
    assert len(future) == 2 and future[0][0] == mine
    assert future[1][0].startswith("`is_gradient_checkpointing` is deprecated")
    assert "transformers" in future[1][1]
