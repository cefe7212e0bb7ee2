"""The server's queues: one timing or race at a time across every browser session; compiles in the compile pool.

Compiles (a target's verdict, Compare's per-target rows, the advisor's stage 2) go through
``explorer.compile.compile_pool.POOL``, up to N at once and fair between sessions; ``session_id`` is how this
browser session is known there, ``workers_setting`` the app's setting for N (server-wide).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.compile.compile_pool import MAX_WORKERS, POOL
from explorer.errors import ExplorerError
from explorer.text import markdown_literal


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

    def enter(self, on_wait: Callable[[int], None] | None = None, poll_s: float = 0.25, give_up: Callable[[], bool] | None = None) -> bool:
        """Wait for this caller's turn (``on_wait(ahead)`` while waiting); False, out of the queue, once ``give_up()``."""
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
                        return True
                    if give_up is not None and give_up():
                        self._waiting.remove(ticket)
                        self._condition.notify_all()
                        return False
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


def session_id() -> str:
    """This browser session's id in the server's compile pool (``local`` outside a Streamlit script run)."""
    context = get_script_run_ctx()
    return context.session_id if context is not None else "local"


def workers_setting(key: str) -> None:
    """The number of compiles the server runs at once: one setting for every session (the pool is the server's)."""
    chosen = st.number_input(
        "Compiles at once (this server, every session)",
        min_value=1,
        max_value=MAX_WORKERS,
        value=POOL.workers,
        step=1,
        key=key,
        help="Compiles run in child processes, each on about one core; by default as many as the cores, fewer where the "
        "host's available memory holds fewer. Changing it changes it for everyone using this server.",
    )
    if int(chosen) != POOL.workers:
        POOL.configure(int(chosen))
    where = f"on the Ray cluster at {markdown_literal(POOL.cluster.address)}" if POOL.cluster is not None else "on this machine"
    st.caption(f"Compiles now: {POOL.running()} running, {POOL.waiting()} waiting, {where}.")


_JOINED: dict[str, str | None] = {}  # EXPLORER_CLUSTER's address -> None (joined) or why not: tried once per server
_JOINING = threading.Lock()


def join_cluster() -> str | None:
    """Join the Ray cluster ``EXPLORER_CLUSTER`` names, once per server process (every session shares the pool);
    why not, when it could not be joined (the compiles then run on this machine). None: joined, or none named."""
    address = os.environ.get("EXPLORER_CLUSTER", "").strip()
    if not address:
        return None
    with _JOINING:
        if address not in _JOINED:
            try:
                POOL.connect(address)
                _JOINED[address] = None
            except ExplorerError as error:
                _JOINED[address] = str(error)
        return _JOINED[address]


def cluster_notice() -> None:
    """In the sidebar: where this server's compiles run, when EXPLORER_CLUSTER names a cluster."""
    problem = join_cluster()
    if problem is not None:
        st.sidebar.warning(f"Compiles run on this machine: {markdown_literal(problem)}")
    elif POOL.cluster is not None:
        st.sidebar.caption(f"Compiles run on the Ray cluster at {markdown_literal(POOL.cluster.address)} ({POOL.cluster.cpus} CPUs).")
