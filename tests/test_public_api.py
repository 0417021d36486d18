"""The public API: a sorted ``__all__`` whose every name exists."""

import spectool
import spectool.testing


def test_all_is_sorted_and_unique() -> None:
    assert spectool.__all__ == sorted(set(spectool.__all__))
    assert spectool.testing.__all__ == sorted(set(spectool.testing.__all__))


def test_every_exported_name_exists() -> None:
    missing = [n for n in spectool.__all__ if not hasattr(spectool, n)]
    assert missing == []
    missing = [n for n in spectool.testing.__all__ if not hasattr(spectool.testing, n)]
    assert missing == []


def test_core_names_are_exported() -> None:
    for name in ("tool", "Toolbox", "ToolCache", "Speculator", "SyncSpeculator",
                 "SpeculativeOpenAI", "speculative", "run_agent", "EngineSink"):
        assert name in spectool.__all__


def test_errors_share_one_root() -> None:
    errors = [getattr(spectool, n) for n in spectool.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, spectool.SpectoolError) for e in errors)
