"""A progress bar on stderr, only when stderr is a terminal (stdout stays clean for --json).

Not to be confused with an engine's forward progress (batch lines), which analysis/progress/stalls.py judges."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.label = ""
        self.total_bytes = 0
        self.done_bytes = 0
        self.total_items = 0
        self.done_items = 0
        self._t0 = time.monotonic()
        self._last = 0.0

    def start(self, label: str, total_bytes: int = 0, total_items: int = 0) -> None:
        self.label, self.total_bytes, self.total_items = label, total_bytes, total_items
        self.done_bytes = self.done_items = 0
        self._t0 = time.monotonic()
        self._draw(force=True)

    def item_done(self, nbytes: int = 0) -> None:
        self.done_items += 1
        self.done_bytes += nbytes
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        pct = 100.0 * self.done_bytes / self.total_bytes if self.total_bytes else 0.0
        mb = self.done_bytes / 1e6
        rate = mb / max(now - self._t0, 1e-6)
        sys.stderr.write(f"\r{self.label}: {self.done_items}/{self.total_items} files, {mb:,.1f} MB "
                         f"({pct:5.1f}%), {rate:,.1f} MB/s ")
        sys.stderr.flush()

    def finish(self, summary: str = "") -> None:
        if not self.enabled:
            return
        self._draw(force=True)
        sys.stderr.write(f"\r{self.label}: {summary}{' ' * 20}\n")
        sys.stderr.flush()
