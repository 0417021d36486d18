"""The tool-output store on its own (no model): issue 18 items 5 (sweep, quotas), 7 (id
takeover) and the server half of 1 (read-only entries bound to their response and consumed).

Each test below fails on the store as it was before (``toolcache.ToolCache``): the sweep was
never called, open() evicted by count across tenants and replaced a live id, and an entry
was served any number of times, also after the response emitted a call the engine did not
serve."""

from __future__ import annotations

import pytest

from spectool.errors import ToolCacheError
from spectool_serving.store import ToolOutputStore

from .conftest import WEATHER

READ = {"name": "get_weather", "params": {"city": "Paris"}, "output": "old"}


def _store(**kw):
    now = [0.0]
    return ToolOutputStore(clock=lambda: now[0], **kw), now


def test_sweep_runs_by_itself_and_forgets_finished_ids():
    store, now = _store(grace=5, sweep_every=1)
    for i in range(50):
        store.open(f"r{i}", "a", [WEATHER])
        store.close(f"r{i}", "a")
    assert len(store) == 50
    now[0] = 10.0  # past the grace period; nobody calls sweep() explicitly
    store.open("fresh", "a", [WEATHER])
    assert len(store) == 1


def test_open_responses_expire_and_entries_are_swept():
    store, now = _store(ttl=3, open_ttl=100, sweep_every=1)
    store.open("r", "a", [WEATHER])
    store.post("r", "a", [READ])
    now[0] = 4.0
    store.sweep()
    assert store.by_name("r", "a", "get_weather") == []
    now[0] = 101.0  # an open response whose close never came (a crashed handler) goes too
    store.sweep()
    assert len(store) == 0


def test_one_tenant_cannot_evict_another_tenants_open_response():
    store, _ = _store(max_open_per_tenant=4, max_responses=8)
    store.open("victim", "a", [WEATHER])
    for i in range(100):  # tenant b floods the store
        try:
            store.open(f"flood{i}", "b", [WEATHER])
        except ToolCacheError as exc:
            assert exc.status_code == 429
    assert store.post("victim", "a", [READ]) == 1  # still open: no 404
    assert store.take("victim", "a", "get_weather", {"city": "Paris"}).output == "old"


def test_a_tenant_over_its_quota_loses_only_its_own_oldest():
    store, _ = _store(max_open_per_tenant=2)
    store.open("a1", "a")
    store.open("b1", "b")
    store.open("b2", "b")
    store.open("b3", "b")
    with pytest.raises(ToolCacheError) as e:
        store.post("b1", "b", [])
    assert e.value.status_code == 404
    assert store.post("a1", "a", []) == 0 and store.post("b3", "b", []) == 0


def test_a_live_id_cannot_be_reopened_or_taken_over():
    store, _ = _store()
    store.open("chatcmpl-x", "a", [WEATHER])
    store.post("chatcmpl-x", "a", [READ])
    with pytest.raises(ToolCacheError) as e:
        store.open("chatcmpl-x", "a", [WEATHER])  # same tenant: refused, not replaced
    assert e.value.status_code == 409
    # another tenant choosing the same id gets a scope of its own, never the owner's
    store.open("chatcmpl-x", "b", [WEATHER])
    store.post("chatcmpl-x", "b", [{**READ, "output": "evil"}])
    assert store.take("chatcmpl-x", "a", "get_weather", {"city": "Paris"}).output == "old"
    assert store.take("chatcmpl-x", "b", "get_weather", {"city": "Paris"}).output == "evil"


def test_read_only_entries_are_served_once_pure_ones_again():
    store, _ = _store()
    store.open("r", "a", [WEATHER])
    store.post(
        "r", "a", [READ, {"name": "get_weather", "params": {"city": "Rome"}, "output": "p", "effect": "pure"}]
    )
    assert store.take("r", "a", "get_weather", {"city": "Paris"}).output == "old"
    assert store.take("r", "a", "get_weather", {"city": "Paris"}) is None  # consumed
    assert all(store.take("r", "a", "get_weather", {"city": "Rome"}).output == "p" for _ in range(3))


def test_no_read_only_entry_after_an_unserved_call():
    store, _ = _store()
    store.open("r", "a", [WEATHER])
    store.post("r", "a", [READ, {**READ, "params": {"city": "Rome"}, "effect": "pure"}])
    store.fence("r", "a")  # the response emitted a call the engine did not serve (a write, maybe)
    assert store.take("r", "a", "get_weather", {"city": "Paris"}) is None
    assert store.post("r", "a", [READ]) == 0  # posted after the fence: not kept
    assert store.take("r", "a", "get_weather", {"city": "Rome"}).output == "old"  # pure survives


def test_entries_are_bound_to_their_response():
    store, _ = _store()
    store.open("turn1", "a", [WEATHER])
    store.post("turn1", "a", [READ])
    store.close("turn1", "a")
    store.open("turn2", "a", [WEATHER])
    assert store.take("turn2", "a", "get_weather", {"city": "Paris"}) is None


def test_malformed_items_are_422():
    store, _ = _store()
    store.open("r", "a", [WEATHER])
    for bad in [
        {"params": {}},
        {"name": "f"},
        {"name": "f", "params": [1], "output": 1},
        {"name": "f", "output": 1, "keep_alive": -1},
        {"name": "f", "output": 1, "keep_alive": True},
        {"name": "f", "output": 1, "extra": 1},
        {"name": "f", "output": 1, "effect": "write"},
    ]:
        with pytest.raises(ToolCacheError) as e:
            store.post("r", "a", [bad])
        assert e.value.status_code == 422, bad
