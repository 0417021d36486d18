"""Random scripts for the scripted model over ``KeyValueWorld``'s tools (get / keys / put /
delete / add): turns of calls, then a final answer. Shared by the lossless property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from spectool.testing import call, say


def kv_scripts(keys: list[str], values: str, max_int: int, *, max_calls: int, max_turns: int) -> Any:
    """Scripts of 1..``max_turns`` turns of 1..``max_calls`` calls each, over ``keys``, the
    one-letter ``values`` and integers 0..``max_int``, ending with ``say("done")``."""
    calls = st.one_of(
        st.builds(lambda k: call("get", key=k), st.sampled_from(keys)),
        st.just(call("keys")),
        st.builds(lambda k, v: call("put", key=k, value=v), st.sampled_from(keys), st.sampled_from(values)),
        st.builds(lambda k: call("delete", key=k), st.sampled_from(keys)),
        st.builds(lambda a, b: call("add", a=a, b=b), st.integers(0, max_int), st.integers(0, max_int)),
    )
    turns = st.lists(st.lists(calls, min_size=1, max_size=max_calls), min_size=1, max_size=max_turns)
    return turns.map(lambda t: [*t, say("done")])
