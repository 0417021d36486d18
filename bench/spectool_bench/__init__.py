"""spectool_bench: measurement for spectool, its own distribution (``spectool-bench``).

Subpackages by topic: ``bfcl`` and ``tau2`` (the data sets), ``workloads`` (their tasks, worlds,
tools and replayed ground truth, below every command), ``harness`` (``spectool bench``), ``report``,
``soak``, ``drafters`` (``spectool drafters``), ``backends``, ``decode`` (``decode-bench``,
``calibrate``), ``engine``, ``vllm``, ``middleware`` (``spectool overhead``). It uses only the
public names of ``spectool`` and ``spectool_serving``; nothing there imports it.
"""

from .report._timeline import Timeline, TimelineRecorder, draw_timeline

__all__ = ["Timeline", "TimelineRecorder", "draw_timeline"]
