"""spectool.bench: measurement (BFCL workloads, the harness, reports, pictures of a turn)."""

from ._timeline import Timeline, TimelineRecorder, draw_timeline

__all__ = ["Timeline", "TimelineRecorder", "draw_timeline"]
