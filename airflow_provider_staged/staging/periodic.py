"""A background action repeated at an interval while a block runs (heartbeats)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """Call ``action`` every ``interval`` seconds in a daemon thread until the block ends."""

    def __init__(self, interval: float, action: Callable[[], None], name: str) -> None:
        self.interval = interval
        self.action = action
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.action()

    def __enter__(self) -> Periodic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
