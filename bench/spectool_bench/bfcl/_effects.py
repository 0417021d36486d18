"""Effects of every BFCL multi-turn method, declared from a measured analysis.

How the table was made (re-run with ``python -m spectool_bench.bfcl._measure_effects``): every
ground-truth call of ``multi_turn_base`` and ``multi_turn_long_context`` (2,345 calls) is run
on fresh instances loaded from each task's initial config, and the owning instance's full
state — recursively, including the state of its seeded ``random.Random`` — is compared before
and after the call. A method is

* ``pure``      if its class is stateless (MathAPI: no ``_load_scenario``, no attributes read);
* ``read_only`` if it was called at least once and never changed state;
* ``mutating``  if any call changed state, **or if no ground-truth call exercised it**
  (unobserved methods are not guessed safe; they are never run early).

Read-only is not pure: ``cd`` changes what ``ls``/``cat`` return, so read-only results are
only valid while no mutating method of the same class ran (scope = the class name).
``tests/bench/test_bench_bfcl.py`` re-runs the analysis and checks this table against it.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

from spectool import Effect

__all__ = ["EFFECTS", "effect_of", "snapshot"]

_READ_ONLY = {
    "GorillaFileSystem": "cat diff du find grep ls sort tail wc",
    "MessageAPI": "get_user_id view_messages_sent",
    "TicketAPI": "get_ticket",
    "TradingBot": "get_account_info get_available_stocks get_current_time get_order_details "
    "get_stock_info get_watchlist",
    "TravelAPI": "compute_exchange_rate contact_customer_support get_credit_card_balance "
    "get_nearest_airport_by_city list_all_airports retrieve_invoice verify_traveler_information",
    "VehicleControlAPI": "check_tire_pressure displayCarStatus estimate_distance "
    "estimate_drive_feasibility_by_mileage find_nearest_tire_shop gallon_to_liter "
    "get_zipcode_based_on_city liter_to_gallon",
}
_MATH = (
    "absolute_value add divide imperial_si_conversion logarithm max_value mean min_value "
    "multiply percentage power round_number si_unit_conversion square_root standard_deviation "
    "subtract sum_values"
)

#: class -> method -> effect, for the methods of the eight executable classes.
EFFECTS: dict[str, dict[str, Effect]] = {
    "MathAPI": {m: Effect.PURE for m in _MATH.split()},
    **{cls: {m: Effect.READ_ONLY for m in names.split()} for cls, names in _READ_ONLY.items()},
}


def effect_of(class_name: str, method: str) -> Effect:
    """The declared effect; anything not declared pure/read-only is mutating."""
    return EFFECTS.get(class_name, {}).get(method, Effect.MUTATING)


def snapshot(obj: Any, path: frozenset[int] = frozenset()) -> Any:
    """A comparable copy of an object graph (parent links become a marker)."""
    if isinstance(obj, (str, int, float, bool, type(None), datetime.date, datetime.time, datetime.timedelta)):
        return obj
    if id(obj) in path:
        return "<cycle>"
    inner = path | {id(obj)}
    if isinstance(obj, random.Random):
        return ("random", obj.getstate())
    if isinstance(obj, dict):
        return {k: snapshot(v, inner) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [snapshot(v, inner) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(repr(v) for v in obj)
    if hasattr(obj, "__dict__"):
        return (type(obj).__name__, {k: snapshot(v, inner) for k, v in vars(obj).items()})
    return repr(obj)
