"""samples="auto": the pure λ decision against hand-computed values, the running estimates, and
the lossless guarantee with λ chosen per turn."""

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spectool
from spectool import ConfigError, Speculator
from spectool._auto import AutoSamples, fit_hits
from spectool.model import (
    ToolOdds,
    choose_samples,
    client_time_speculative,
    client_time_standard,
    hit_rate_at,
)
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say
from tests.core.helpers import until


def test_hit_rate_at_is_one_minus_all_samples_missing():
    assert hit_rate_at(0.5, 0) == 0.0
    assert hit_rate_at(0.5, 1) == pytest.approx(0.5)
    assert hit_rate_at(0.5, 3) == pytest.approx(0.875)
    with pytest.raises(ConfigError):
        hit_rate_at(1.5, 1)


def test_choose_samples_hand_computed():
    # G = 2, T = 1, g = 0.5: a hit saves G + T − max{G, g + T} = 1 s. p = 0.5, one sample costs 0.2 s:
    # net(λ) = (1 − 0.5^λ) − 0.2λ → λ=1: 0.3, λ=2: 0.35, λ=3: 0.275 → λ = 2.
    c = choose_samples(2.0, 0.5, [ToolOdds(1.0, 0.5, 1.0)], cost_per_sample_s=0.2, max_samples=5)
    assert c.samples == 2 and c.net_s == pytest.approx(0.35) and c.alpha == pytest.approx(0.75)
    # The saving is Eq. 1 − Eq. 2 at the expected α.
    std, spec = client_time_standard(2.0, 1.0), client_time_speculative(2.0, 0.5, 1.0, c.alpha)
    assert c.saved_s == pytest.approx(std - spec)
    assert [row[0] for row in c.table] == [0, 1, 2, 3, 4, 5]


def test_choose_samples_does_not_draft_when_it_cannot_pay():
    # The drafter is slower than the model (g ≥ G): a hit cannot save anything.
    assert choose_samples(1.0, 1.5, [ToolOdds(1.0, 0.9, 1.0)]).samples == 0
    # A drafter that never hits, at any price.
    assert choose_samples(2.0, 0.1, [ToolOdds(1.0, 0.0, 1.0)]).samples == 0
    # Costly samples: 0.5 s each for at most 1 s saved with p = 0.3.
    assert choose_samples(2.0, 0.1, [ToolOdds(1.0, 0.3, 1.0)], cost_per_sample_s=0.5).samples == 0
    # Free samples, no extra time per sample: more samples never hurt, ties go to the smaller λ.
    assert choose_samples(2.0, 0.1, [ToolOdds(1.0, 1.0, 1.0)], max_samples=9).samples == 1


def test_choose_samples_weighs_the_tool_mix_and_the_time_per_extra_sample():
    mix = [ToolOdds(3.0, 0.0, 1.0), ToolOdds(1.0, 0.6, 2.0)]  # 3 of 4 calls are never drafted
    c = choose_samples(2.0, 0.2, mix, cost_per_sample_s=0.05, max_samples=9)
    assert 0 < c.samples < 9 and c.alpha <= 0.25
    # Each further sample adds 0.4 s of drafting: g(λ) + T = 1.2, 1.6, 2.0, 2.4 … passes G = 2 after
    # λ = 3, so a hit saves 1 s up to λ = 3 and 0.6 s at λ = 4: α·saved = .3, .51, .657, .456 → λ = 3.
    slow = choose_samples(2.0, 0.2, [ToolOdds(1.0, 0.3, 1.0)], g_per_extra_sample=0.4, max_samples=9)
    assert slow.samples == 3 and slow.saved_s == pytest.approx(0.657)


@settings(max_examples=200, deadline=None)
@given(G=st.floats(0.01, 5), g=st.floats(0, 5), T=st.floats(0, 5), p=st.floats(0, 1), cost=st.floats(0, 1))
def test_the_choice_is_the_best_of_its_table_and_never_negative(G, g, T, p, cost):
    c = choose_samples(G, g, [ToolOdds(1.0, p, T)], cost_per_sample_s=cost, max_samples=6)
    assert c.net_s >= 0.0 and c.net_s == pytest.approx(max(row[3] for row in c.table))
    if c.samples == 0:
        assert all(row[3] <= 1e-12 for row in c.table)


def test_auto_stops_drafting_a_useless_drafter_and_explores_now_and_then():
    auto = AutoSamples(max_samples=5, cost_per_sample_s=0.05, explore_every=4)
    assert auto.choose() == 1  # nothing seen yet
    for _ in range(30):
        auto.observe_draft(1, 0.1)
        auto.observe_tool("get", 1.0)
        auto.observe_turn(1, 2.0, [("get", True, False)])  # never a hit
    picks = [auto.choose() for _ in range(8)]
    assert picks.count(0) == 6 and picks.count(1) == 2  # every 4th idle turn explores with λ = 1


def test_auto_drafts_more_when_samples_add_hits():
    auto = AutoSamples(max_samples=5, cost_per_sample_s=0.01)
    for i in range(60):
        lam = 1 + i % 3
        auto.observe_draft(lam, 0.2)
        auto.observe_tool("get", 1.0)
        auto.observe_turn(lam, 2.0, [("get", True, (i * 7919) % 100 < 100 * hit_rate_at(0.4, lam))])
    assert auto.choose() >= 2 and auto.last is not None and auto.last.alpha > 0.5


def test_bad_samples_option_is_a_config_error():
    with pytest.raises(ConfigError, match="samples"):
        Speculator([], samples="sometimes")
    with pytest.raises(ConfigError):
        Speculator([], samples="auto", sample_cost=-1)


KEYS = ["a", "b"]
calls = st.one_of(
    st.builds(lambda k: call("get", key=k), st.sampled_from(KEYS)),
    st.just(call("keys")),
    st.builds(lambda k, v: call("put", key=k, value=v), st.sampled_from(KEYS), st.sampled_from("xy")),
    st.builds(lambda a, b: call("add", a=a, b=b), st.integers(0, 2), st.integers(0, 2)),
)
scripts = st.lists(st.lists(calls, min_size=1, max_size=3), min_size=1, max_size=6).map(
    lambda turns: [*turns, say("done")]
)


async def _run(script, drafter, **options):
    world = KeyValueWorld(latency=0.001)
    model = ScriptedModel(script)
    async with spectool.speculative(openai_client(model), world.toolbox, drafter, **options) as c:
        result = await spectool.run_agent(c, model="m", messages="please", stream=True)
    return result, world


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=scripts, hit_rate=st.sampled_from([0.0, 0.5, 1.0]), cost=st.sampled_from([0.0, 10.0]))
def test_transcripts_are_identical_with_auto_samples(script, hit_rate, cost):
    async def check():
        base, bw = await _run(script, None, eager=False)
        drafter = ScriptedDrafter(ScriptedModel(script), hit_rate=hit_rate)
        spec, sw = await _run(script, drafter, samples="auto", sample_cost=cost)
        assert spec.transcript_json() == base.transcript_json() and sw.data == bw.data
        assert sw.log.count("put") == bw.log.count("put")
        if cost > 0:  # a sample costing 10 s can never pay: only the first request drafts
            assert spec.stats["drafts"] <= 1

    anyio.run(check)


def test_fit_hits_tells_a_ceiling_from_the_chance_per_sample():
    # A deterministic drafter: λ samples hit exactly when one does (30 % of calls), at any λ.
    records = [(lam, i % 10 < 3) for lam in (1, 5) for i in range(100)]
    a, p = fit_hits(records)
    assert a == pytest.approx(0.3, abs=0.05) and p > 0.8
    # Independent samples with p = 0.3: no ceiling below 1.
    import random

    rng = random.Random(2)
    records = [(lam, rng.random() < hit_rate_at(0.3, lam)) for lam in (1, 3, 6) for _ in range(300)]
    a, p = fit_hits(records)
    assert a > 0.85 and p == pytest.approx(0.3, abs=0.08)


def test_auto_keeps_few_samples_for_a_drafter_whose_samples_agree():
    auto = AutoSamples(max_samples=5, cost_per_sample_s=0.05)
    picked = []
    for i in range(60):
        lam = auto.choose()
        picked.append(lam)
        auto.observe_draft(lam, 0.05)
        auto.observe_tool("get", 1.0)
        auto.observe_turn(lam, 2.0, [("get", True, i % 10 < 4)])  # hits do not depend on λ
    # Independent samples would call for λ = 5 (α 0.4 → 0.92); the ceiling says more buy little.
    assert sum(picked[-20:]) / 20 < 2.0 and max(picked[-20:]) <= 2
    assert 0.3 < auto.odds()[0].ceiling < 0.6


# -- issue 26, class 4: λ = auto backs off; wasted runs are counted live --------------------


def _never_hitting(auto: AutoSamples, turns: int) -> list[int]:
    """λ per turn for a drafter whose every sample starts one run the model never asks for
    (G = T = 1 s, g = 0.1 s per sample)."""
    chosen = []
    for _ in range(turns):
        lam = auto.choose()
        chosen.append(lam)
        if lam:
            auto.observe_draft(lam, 0.1 * lam)
        auto.observe_tool("get", 1.0)
        auto.observe_turn(lam, 1.0, [("get", True, False)], runs=lam)
    return chosen


def test_a_drafter_that_never_hits_converges_to_no_drafting_within_25_turns():
    auto = AutoSamples(max_samples=9)  # the defaults: sample_cost 0, run cost DEFAULT_RUN_COST_S
    chosen = _never_hitting(auto, 80)
    assert auto.last is not None and auto.last.samples == 0
    # the bound: from turn 25 on the decision is λ = 0; only the exploration turn (every 8th
    # idle turn, one sample) still drafts
    assert all(lam <= 1 for lam in chosen[25:])
    assert sum(chosen[25:]) <= len(chosen[25:]) // 8 + 1
    assert sum(chosen) < 60  # against ~180 speculative runs at λ 2-6 when runs were free


def test_negative_control_free_runs_never_back_off():
    """With the old cost of a run (zero) the same drafter is drafted for ever."""
    auto = AutoSamples(max_samples=9, cost_per_run_s=0.0)
    chosen = _never_hitting(auto, 80)
    assert min(chosen[25:]) >= 1


def test_choose_samples_charges_only_the_wasted_runs():
    # p = 1: every sample's one run is the model's call: nothing wasted, a run cost changes nothing
    sure = choose_samples(2.0, 0.1, [ToolOdds(1.0, 1.0, 1.0)], runs_per_sample=1.0, cost_per_run_s=0.5)
    assert sure.samples == 1 and sure.net_s == pytest.approx(1.0)
    never = choose_samples(2.0, 0.1, [ToolOdds(1.0, 0.01, 1.0)], runs_per_sample=1.0, cost_per_run_s=0.05)
    assert never.samples == 0


@pytest.mark.anyio
async def test_wasted_runs_are_live_during_a_session():
    world = KeyValueWorld()
    async with Speculator(world.toolbox) as spec:
        assert spec.cache.speculate(spectool.ToolCall("get", {"key": "a"}))
        await until(lambda: spec.stats()["wasted_runs"] == 1)  # the run finished; nobody asked for it
        await spec.resolve(spectool.ToolCall("get", {"key": "a"}))  # now it is used: not wasted
        assert spec.stats()["wasted_runs"] == 0


# -- estimates that outlive a session (issue 24 item 5) --------------------------------------


async def _session(client, drafter, **options):
    world = KeyValueWorld()
    async with spectool.speculative(client, world.toolbox, drafter, **options) as c:
        result = await spectool.run_agent(c, model="m", messages="please")
    return result, c.speculator.auto


def test_a_second_session_on_one_client_starts_from_the_first_ones_estimates():
    # Every draft misses and a sample costs 10 s: once a request has been seen, auto stops
    # drafting. Each session is one agent task, as in the main job.
    script = [call("get", key="a"), call("get", key="b"), say("done")]

    async def check():
        drafter = ScriptedDrafter(lambda messages: [call("get", key="zz")], hit_rate=1.0)
        client = openai_client(ScriptedModel(script * 2))
        first, est1 = await _session(client, drafter, samples="auto", sample_cost=10.0)
        second, est2 = await _session(client, drafter, samples="auto", sample_cost=10.0)
        assert est1 is est2  # one estimator per (client, drafter, settings)
        assert first.stats["samples_chosen"] == [1, 0, 0]  # cold: λ = 1 until a request is seen
        assert second.stats["samples_chosen"] == [0, 0, 0]  # warm from its first request on
        assert second.stats["undrafted_turns"] == 3 and second.stats["drafts"] == 0
        # a fresh client starts cold; so does another drafter or other settings on the same client
        fresh, est3 = await _session(
            openai_client(ScriptedModel(script)), drafter, samples="auto", sample_cost=10.0
        )
        assert est3 is not est1 and fresh.stats["samples_chosen"] == [1, 0, 0]
        other = ScriptedDrafter(lambda messages: [call("get", key="zz")], hit_rate=1.0)
        client2 = openai_client(ScriptedModel(script * 2))
        await _session(client2, drafter, samples="auto", sample_cost=10.0)
        again, _ = await _session(client2, other, samples="auto", sample_cost=10.0)
        assert again.stats["samples_chosen"][0] == 1
        cheap, _ = await _session(client, drafter, samples="auto", sample_cost=0.5)
        assert cheap.stats["samples_chosen"][0] == 1

    anyio.run(check)


def test_an_estimator_the_user_keeps_carries_over_between_clients():
    script = [call("get", key="a"), call("get", key="b"), say("done")]
    kept = spectool.AutoSamples(max_samples=4, cost_per_sample_s=10.0)

    async def check():
        drafter = ScriptedDrafter(lambda messages: [call("get", key="zz")], hit_rate=1.0)
        first, est1 = await _session(openai_client(ScriptedModel(script)), drafter, samples=kept)
        second, est2 = await _session(openai_client(ScriptedModel(script)), drafter, samples=kept)
        assert est1 is kept and est2 is kept
        assert first.stats["samples_chosen"] == [1, 0, 0] and second.stats["samples_chosen"] == [0, 0, 0]
        assert kept.calls["get"] == 4  # both sessions' calls fed the one estimator

    anyio.run(check)


def test_fixed_samples_are_reported_per_request_too():
    script = [call("get", key="a"), say("done")]

    async def check():
        drafter = ScriptedDrafter(ScriptedModel(script))
        result, auto = await _session(openai_client(ScriptedModel(script)), drafter, samples=3)
        assert auto is None and result.stats["samples_chosen"] == [3, 3]

    anyio.run(check)


def test_the_per_client_estimators_never_keep_a_client_or_grow_without_bound():
    import gc
    import weakref

    from spectool._estimates import PER_CLIENT, _registry, shared_estimator

    class Client:  # any object stands for the wrapped SDK client here
        pass

    class Drafter:
        async def propose(self, request):
            return []

    client, drafter = Client(), Drafter()
    est = shared_estimator(client, drafter, "auto", {})
    assert isinstance(est, AutoSamples) and shared_estimator(client, drafter, "auto", {}) is est
    assert shared_estimator(client, drafter, "auto", {"max_samples": 3}) is not est
    assert shared_estimator(client, drafter, 3, {}) == 3
    assert shared_estimator(client, None, "auto", {}) == "auto"
    kept = [Drafter() for _ in range(PER_CLIENT + 5)]  # a drafter per session: oldest dropped
    for d in kept:
        shared_estimator(client, d, "auto", {})
    assert len(_registry[client]) == PER_CLIENT
    alive = weakref.ref(client)
    del client
    gc.collect()
    assert alive() is None  # the registry does not keep a client alive (its entry goes with it)
    assert shared_estimator([], drafter, "auto", {}) == "auto"  # unhashable: cold, as before
