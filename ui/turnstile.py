"""One timing or race at a time across every browser session of this server."""

from __future__ import annotations

import threading
from typing import Callable


class Turnstile:
    """First come, first served: one timing runs at a time in this process; the rest wait in order."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._waiting: list[int] = []
        self._next_ticket = 0
        self._busy = False

    def position(self, ticket: int) -> int:
        """How many timings are ahead of this ticket (the running one included)."""
        with self._condition:
            return self._waiting.index(ticket) + (1 if self._busy else 0)

    def queue_length(self) -> int:
        with self._condition:
            return len(self._waiting) + (1 if self._busy else 0)

    def enter(self, on_wait: Callable[[int], None] | None = None, poll_s: float = 0.25) -> None:
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._waiting.append(ticket)
        try:
            while True:
                with self._condition:
                    if not self._busy and self._waiting[0] == ticket:
                        self._waiting.pop(0)
                        self._busy = True
                        return
                    ahead = self._waiting.index(ticket) + (1 if self._busy else 0)
                if on_wait:
                    on_wait(ahead)
                with self._condition:
                    self._condition.wait(poll_s)
        except BaseException:
            with self._condition:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                self._condition.notify_all()
            raise

    def leave(self) -> None:
        with self._condition:
            self._busy = False
            self._condition.notify_all()


TURNSTILE = Turnstile()
