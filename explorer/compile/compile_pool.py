"""Compiles for targets, several at once: one queue per server, shared fairly between sessions, host memory never overcommitted.

``POOL`` is this process's one ``CompilePool``: the advisor's stage 2, the Compare page's per-target compiles and the
command line's compiles of several targets all go through ``compile_many``, which takes a session's (layout, target)
pairs, answers the disk cache's hits at once and queues the rest. Up to ``workers`` compiles run at once, each in its
own child process (``target_compile.compile_target``), or, once ``connect`` has joined a Ray cluster, as Ray tasks
on its nodes (``explorer.compile.cluster``).

- **Fair between sessions.** When a slot frees, the next compile is the first waiting one of the session with the
  fewest compiles running (ties: the session whose turn came longest ago), so a session that queued ten compiles
  does not hold back one that queued one. ``position`` says how many compiles will start before a given one.
- **Host memory never overcommitted.** A compile starts only when its expected peak (``compile_bytes``) fits in the
  memory the host has available (``/proc/meminfo``'s MemAvailable) less what the running compiles may still take
  (their expected peak less what they hold already). The expected peak of a model's compile is the largest child
  peak measured on this server for the same model (``VmHWM`` of the child, read while it runs), else
  ``DEFAULT_COMPILE_BYTES``. One compile always may start, whatever the memory, as before there was a pool.
- **Stop** (the caller's ``should_stop``) drops the session's waiting compiles and kills its running ones; what was
  done is kept (each compile's result is in the disk cache as soon as it ends).

The default number of workers (``default_workers``) is the smaller of the CPU cores and how many expected compiles
the available memory holds: one compile keeps about one core busy (XLA's passes are mostly serial).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from typing import Callable

from explorer.compile.compile_cache import cached
from explorer.compile.compile_result import TargetCompile
from explorer.compile.compiled import available_memory_bytes
from explorer.errors import ExplorerError
from explorer.formats import counted
from explorer.layout import Layout
from explorer.compile.target_compile import Stopped, check_compilable, compile_target
from explorer.hardware.targets import Target

GIB = 1 << 30
DEFAULT_COMPILE_BYTES = GIB  # a compile child's peak before one was measured: a small MLP's peaked at 0.6 GiB (docs/cluster.md)
MAX_WORKERS = 64
POLL_S = 0.2
REPORT_S = 1.0  # the callbacks hear of each change, and at least this often (the elapsed seconds they show)
STOP_WAIT_S = 10.0  # a stopped compile's child is killed within a poll; a Ray task's cancel takes longer
LOCAL = "local"  # ``Outcome.compiled_on`` for a compile in a child process of this machine
CACHE = "cache"  # ... for a result read back from the disk cache


def default_workers(cores: int | None = None, available: int | None = None, need: int = DEFAULT_COMPILE_BYTES) -> int:
    """Compiles to run at once: the CPU cores, fewer where the available host memory holds fewer expected compiles; at least 1."""
    cores = cores or os.cpu_count() or 1
    available = available_memory_bytes() if available is None else available
    return max(1, min(cores, available // max(need, 1), MAX_WORKERS))


def check_workers(workers: int, field: str = "--workers") -> int:
    """``workers`` when it is a usable number of compiles at once, else ExplorerError naming ``field``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ExplorerError(field, workers, f"is not a number of compiles at once between 1 and {MAX_WORKERS}")
    return workers


def peak_rss_bytes(pid: int | None) -> int:
    """The process's peak resident memory so far (``VmHWM``), 0 when it cannot be read (ended, not Linux)."""
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


@dataclasses.dataclass(eq=False)
class Job:
    """One compile in the pool: queued by ``session``, then running (``stage``, ``started``), then done."""

    session: str
    layout: Layout
    target: Target
    need_bytes: int
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    stage: str = "waiting"
    started: float | None = None
    done: bool = False
    pid: int | None = None
    peak_bytes: int = 0  # the child's peak resident memory, as read while it ran
    result: TargetCompile | None = None
    cached: bool = False
    compiled_on: str = LOCAL
    error: BaseException | None = None
    fresh: bool = False  # compile again even where the cache holds a result (the page's "Compile again")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one (layout, target) of ``compile_many``: a result, or the error, or stopped before it ended.

    ``compiled_on``: ``"local"`` (a child process here), a Ray node's id, or ``"cache"`` (read back from the disk cache).
    """

    layout: Layout
    result: TargetCompile | None
    cached: bool = False
    compiled_on: str = LOCAL
    error: ExplorerError | None = None
    stopped: bool = False


def run_local(job: Job) -> tuple[TargetCompile, bool, str]:
    """Compile ``job`` in a child process of this machine, following its stage and its peak memory."""

    def on_stage(stage: str, _elapsed: float) -> None:
        job.stage = stage
        job.peak_bytes = max(job.peak_bytes, peak_rss_bytes(job.pid))

    result, hit = compile_target(
        job.layout,
        job.target,
        on_stage=on_stage,
        should_stop=job.stop.is_set,
        on_start=lambda pid: setattr(job, "pid", pid),
        fresh=job.fresh,
    )
    return result, hit, LOCAL


class CompilePool:
    """Up to ``workers`` compiles at once, admitted by host memory, fair between sessions (see the module's docstring).

    ``runner(job) -> (result, cached, compiled_on)`` does one compile (``run_local``, or the cluster's); ``memory()``
    is the host memory available now. Both are parameters so that the scheduling can be tested on its own.
    """

    def __init__(
        self,
        workers: int | None = None,
        memory: Callable[[], int] = available_memory_bytes,
        runner: Callable[[Job], tuple[TargetCompile, bool, str]] = run_local,
    ) -> None:
        self._condition = threading.Condition()
        self._workers = workers
        self._memory = memory
        self._local_runner = runner
        self._runner = runner
        self._waiting: dict[str, collections.deque[Job]] = {}
        self._turns: list[str] = []  # sessions in the order their turn came last (longest ago first)
        self._running: list[Job] = []
        self._measured: dict[tuple, int] = {}  # model key -> the largest compile peak measured for it
        self.cluster = None  # an ``explorer.compile.cluster.Cluster`` once ``connect`` joined one

    # --- settings ---------------------------------------------------------------------------------

    @property
    def workers(self) -> int:
        """Compiles at once: as set, else on a cluster its CPUs, else ``default_workers()``."""
        if self._workers is not None:
            return self._workers
        if self.cluster is not None:
            return self.cluster.cpus
        return default_workers()

    def configure(self, workers: int | None) -> None:
        """Set the compiles run at once (None: the default)."""
        with self._condition:
            self._workers = None if workers is None else check_workers(workers)
            self._dispatch()

    def connect(self, address: str | None) -> None:
        """Run compiles as Ray tasks on the cluster at ``address`` (``explorer.compile.cluster``); None: on this machine again."""
        if address is None:
            with self._condition:
                joined, self.cluster, self._runner = self.cluster, None, self._local_runner
            if joined is not None:
                from explorer.compile.cluster import disconnect

                disconnect()
            return
        from explorer.compile.cluster import connect

        cluster = connect(address)
        with self._condition:
            self.cluster, self._runner = cluster, cluster.run

    def compile_bytes(self, layout: Layout) -> int:
        """The host memory a compile of ``layout``'s model is expected to take at its peak (see the module's docstring)."""
        with self._condition:
            return self._measured.get(layout.model.key(), DEFAULT_COMPILE_BYTES)

    # --- the queue --------------------------------------------------------------------------------

    def running(self) -> int:
        with self._condition:
            return len(self._running)

    def waiting(self) -> int:
        with self._condition:
            return sum(len(jobs) for jobs in self._waiting.values())

    def position(self, job: Job) -> int:
        """How many waiting compiles will start before ``job`` (0: it starts at the next free slot). Running: 0."""
        with self._condition:
            return self._order().index(job) if not job.started and not job.done else 0

    def _order(self) -> list[Job]:
        """Every waiting job in the order the dispatcher will start them, should nothing end meanwhile."""
        queues = {s: list(jobs) for s, jobs in self._waiting.items() if jobs}
        running = collections.Counter(j.session for j in self._running)
        turns = list(self._turns)
        order = []
        while queues:
            session = self._next_session(queues, running, turns)
            order.append(queues[session].pop(0))
            if not queues[session]:
                del queues[session]
            running[session] += 1
            turns.remove(session)
            turns.append(session)
        return order

    @staticmethod
    def _next_session(queues, running, turns) -> str:
        return min(queues, key=lambda s: (running[s], turns.index(s)))

    def _admissible(self, job: Job) -> bool:
        if not self._running:
            return True
        if len(self._running) >= self.workers:
            return False
        if self.cluster is not None:  # the nodes' memory: each task asks Ray for its expected peak
            return True
        still = sum(max(0, j.need_bytes - j.peak_bytes) for j in self._running)  # what the running ones may still take
        return job.need_bytes <= self._memory() - still

    def _dispatch(self) -> None:
        """Start waiting jobs while a slot is free and the next one fits (under the lock)."""
        while True:
            queues = {s: jobs for s, jobs in self._waiting.items() if jobs}
            if not queues:
                return
            session = self._next_session(queues, collections.Counter(j.session for j in self._running), self._turns)
            job = queues[session][0]
            if not self._admissible(job):
                return
            queues[session].popleft()
            self._turns.remove(session)
            self._turns.append(session)
            job.started = time.monotonic()
            job.stage = "starting"
            self._running.append(job)
            threading.Thread(target=self._run, args=(job,), daemon=True, name=f"compile-{job.layout.name}").start()

    def _run(self, job: Job) -> None:
        try:
            job.result, job.cached, job.compiled_on = self._runner(job)
        except BaseException as error:  # noqa: BLE001 (handed to the session waiting for it)
            job.error = error
        finally:
            with self._condition:
                self._running.remove(job)
                job.done = True
                if job.peak_bytes:
                    key = job.layout.model.key()
                    self._measured[key] = max(self._measured.get(key, 0), job.peak_bytes)
                self._forget(job.session)
                self._dispatch()
                self._condition.notify_all()

    def _forget(self, session: str) -> None:
        """Drop a session with nothing waiting or running from the turns (under the lock)."""
        if not self._waiting.get(session) and not any(j.session == session for j in self._running):
            self._waiting.pop(session, None)
            if session in self._turns:
                self._turns.remove(session)

    def submit(self, session: str, layout: Layout, target: Target, fresh: bool = False) -> Job:
        job = Job(session, layout, target, self.compile_bytes(layout), fresh=fresh)
        with self._condition:
            if session not in self._turns:
                self._turns.append(session)
            self._waiting.setdefault(session, collections.deque()).append(job)
            self._dispatch()
        return job

    def cancel(self, jobs: list[Job]) -> None:
        """Drop the waiting ones from the queue and stop the running ones."""
        with self._condition:
            for job in jobs:
                job.stop.set()
                queue = self._waiting.get(job.session)
                if queue and job in queue:
                    queue.remove(job)
                    job.done = True
            for session in {job.session for job in jobs}:
                self._forget(session)
            self._condition.notify_all()

    def wait(self, jobs: list[Job], timeout_s: float = STOP_WAIT_S) -> bool:
        """Wait until every one of ``jobs`` is done (at most ``timeout_s``); whether they all are."""
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while not all(j.done for j in jobs):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._condition.wait(left)
        return True

    def compile_many(
        self,
        session: str,
        items: list[tuple[Layout, Target]],
        on_wait: Callable[[int, int], None] | None = None,
        on_progress: Callable[[list[Job]], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        poll_s: float = POLL_S,
        fresh: bool = False,
    ) -> list[Outcome]:
        """Each (layout, target)'s result, in order: from the disk cache, else compiled in the pool.

        A pair the target cannot take (``check_compilable``) and a failed compile are outcomes with their error.
        While the session's compiles wait or run, in the caller's thread every ``poll_s``: ``on_wait(ahead, running)``
        (``ahead``: compiles that start before the session's next one; ``running``: the session's own running now)
        and ``on_progress(jobs)`` (the session's jobs running): on each change, else once every ``REPORT_S``. ``should_stop()`` True: the waiting ones are dropped
        and the running ones killed; their outcomes say ``stopped``. Any exception in the caller's thread (a page's
        rerun) cancels them too. ``fresh``: compile again even where the disk cache holds a result (it is replaced).
        """
        outcomes: list[Outcome | None] = [None] * len(items)
        jobs: dict[int, Job] = {}
        for index, (layout, target) in enumerate(items):
            try:
                check_compilable(layout, target)
            except ExplorerError as error:
                outcomes[index] = Outcome(layout, None, error=error)
                continue
            hit = None if fresh else cached(layout, target)
            if hit is not None:
                outcomes[index] = Outcome(layout, hit, cached=True, compiled_on=CACHE)
        try:
            for index, (layout, target) in enumerate(items):
                if outcomes[index] is None:
                    jobs[index] = self.submit(session, layout, target, fresh)
            stopped = False
            shown: list = [None, 0.0]  # what the callbacks were last told, and when
            while True:
                with self._condition:
                    if all(j.done for j in jobs.values()):
                        break
                    self._condition.wait(poll_s)
                if not stopped and should_stop and should_stop():
                    stopped = True
                    self.cancel(list(jobs.values()))
                mine = list(jobs.values())
                waiting = [j for j in mine if not j.started and not j.done]
                running = [j for j in mine if j.started and not j.done]
                place = (
                    min(self.position(j) for j in waiting) if waiting else None,
                    len(running),
                    [(j.layout.name, j.stage) for j in running],
                )
                if place == shown[0] and time.monotonic() - shown[1] < REPORT_S:
                    continue  # nothing new to say: a page redraws less (eight sessions redrawing 5 times a second slowed the server)
                shown[:] = [place, time.monotonic()]
                if on_wait and waiting:
                    on_wait(place[0], len(running))
                if on_progress:
                    on_progress(running)
        except BaseException:
            self.cancel(list(jobs.values()))
            self.wait(list(jobs.values()))  # their child processes killed before this thread (or process) goes on
            raise
        for index, job in jobs.items():
            outcomes[index] = self._outcome(job)
        return outcomes

    @staticmethod
    def _outcome(job: Job) -> Outcome:
        if isinstance(job.error, Stopped) or (job.error is None and job.result is None):
            return Outcome(job.layout, None, compiled_on=job.compiled_on, stopped=True)
        if isinstance(job.error, ExplorerError):
            return Outcome(job.layout, None, compiled_on=job.compiled_on, error=job.error)
        if job.error is not None:
            raise job.error
        return Outcome(job.layout, job.result, job.cached, job.compiled_on)


POOL = CompilePool()
"""This process's queue of compiles: every session of a server shares it."""


def queue_text(ahead: int, running: int, pool: CompilePool = POOL) -> str:
    """The waiting line a page or the command line shows: the place in the server's queue and what runs."""
    mine = f"; {running} of yours running" if running else ""
    return f"waiting: {ahead} compile(s) before yours in this server's queue ({pool.running()} running, up to {pool.workers} at once{mine})"


STAGE_WORDS = {  # a compile's stage (``target_compile.STAGES``, and the pool's own) as a progress line says it
    "waiting": "waiting",
    "starting": "starting its process",
    "trace": "tracing the train step",
    "lower": "lowering it",
    "compile": "XLA compiling",
    "analyze": "reading the compiled program",
}


def jobs_text(running: list[Job], ahead: int | None = None, pool: CompilePool = POOL) -> str:
    """One line for a session's compiles: what each running one is doing, and whether more of them wait for a free
    worker (``ahead``: compiles that start before the next of them; None: none of them waits). Without durations: a
    caller adds the time, so that the line changes only when something happens."""
    parts = [f"{job.layout.name}: {STAGE_WORDS.get(job.stage, job.stage)}" for job in running]
    if ahead is not None:
        others = f", {counted(ahead, 'compile')} of other sessions first" if ahead else ""
        parts.append(
            ("the rest wait" if running else "waiting")
            + f" for a free worker ({pool.running()} running in this server, up to {pool.workers} at once{others})"
        )
    return "; ".join(parts)
