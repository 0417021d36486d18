"""Progress bars for long measurement commands: tqdm on stderr, with rate and ETA.

One helper so every long command (bench sweep, drafters eval, soak) shows the same bar; on a
terminal tqdm redraws in place, and when stderr is not a TTY (a log file, CI) it writes a plain
line at most every ``log_interval_s`` so logs stay readable."""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["Progress"]


class Progress:
    """A bar over ``total`` units (model steps, tasks…); ``label`` names the current arm."""

    def __init__(
        self,
        total: int,
        enabled: bool = True,
        *,
        unit: str = "step",
        stream: IO[str] | None = None,
        log_interval_s: float = 15.0,
    ) -> None:
        self.enabled, self.done = enabled, 0
        self._bar: Any = None
        if not enabled:
            return
        from tqdm import tqdm  # measurement layer only; imported when a bar is actually shown

        out = sys.stderr if stream is None else stream
        tty = bool(getattr(out, "isatty", lambda: False)())
        self._bar = tqdm(
            total=max(1, total),
            unit=unit,
            # a log has no carriage returns: whole lines instead of in-place redraws
            file=out if tty else _LineWriter(out),
            dynamic_ncols=tty,
            ncols=None if tty else 100,
            mininterval=0.2 if tty else log_interval_s,
            ascii=not tty,
            leave=True,
        )

    @property
    def label(self) -> str:
        return "" if self._bar is None else str(self._bar.desc)

    @label.setter
    def label(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=False)

    def step(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class _LineWriter:
    """Turns tqdm's in-place redraws (``\\r`` + text) into whole lines for a log."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.out.write(line + "\n")

    def flush(self) -> None:
        self.out.flush()
