"""Every target on its own schedule, as Prometheus runs one scrape loop per target.

An asyncio loop in one thread runs a task per target: wait for the next multiple of the
interval (whole seconds at a whole-second interval, so stored sample times keep their true
spacing), scrape within the timeout (always shorter than the interval), hand the outcome
over, repeat. A tick that passes while the target's previous scrape is still running (or
while the process is starved) is skipped and counted on the next outcome
(``skipped_ticks``), so every tick is a scrape, a failure or a skip. A target that never
finishes its body holds only its own task, never the others'. A writer thread groups the
outcomes that arrive together and stores each group (gpuscope/collector/scraping/ingest.py), so a
tick of a thousand targets is a few transactions, not a thousand; a group closes as soon as
no scrape is in flight (waiting on would only delay the tick's commit), else after
``group_seconds`` (0.5 s, at most half the interval) or at ``max_group_samples``
(100,000). Outcomes waiting for a slow store are bounded in samples; past the bound a page
is dropped and counted (``store_backlog``), never queued without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence

from gpuscope.collector.scraping.cpu_budget import DEFAULT_SHARE, MAX_SKIP, ticks_to_skip
from gpuscope.collector.scraping.fetch import Client
from gpuscope.collector.scraping.ingest import StoreFailed
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape import Scraper

log = logging.getLogger(__name__)

STORE_BACKLOG = "store_backlog"


def next_tick(tick: float, now: float, interval: float) -> tuple[float, int]:
    """The next tick of a schedule on multiples of ``interval`` after a scrape that was due
    at ``tick`` ended at ``now``, and how many ticks in between get no scrape: every tick
    is a scrape or a skip, as Prometheus accounts for them."""
    following = math.floor(now / interval + 1) * interval
    due = tick + interval  # the tick after the one just scraped
    skipped = max(0, round((following - due) / interval))
    return following, skipped


#: How often the scraping thread looks at the target list (added targets start, removed
#: ones stop): Prometheus's discovery manager passes changes on at most every 5 s too. A
#: wake-up a second was ~0.1 ms of CPU a second, 3 % of the collector's on the 32-agent
#: benchmark (issue 27).
TARGETS_REFRESH_SECONDS = 5.0
#: The writer's wait for an outcome when none comes: only a safety net, since the scraping
#: thread wakes it (with None) when its last scrape of a tick ends and when it stops.
WRITER_WAKE_SECONDS = 30.0
#: The longest the writer holds a tick's pages to commit them with the next ticks', and
#: :data:`MAX_COMMIT_TICKS` the most ticks it commits together (half an interval more
#: when a tick is late): a transaction and each of
#: its statements cost ~1 ms of CPU whatever their size (issue 39), so at a 5 s interval
#: three ticks a transaction save two thirds of that; at 15 s (the default) and over, no
#: tick waits for another.
COMMIT_HOLD_SECONDS = 10.0
MAX_COMMIT_TICKS = 3


def commit_ticks(interval_seconds: float) -> int:
    """Ticks committed together at ``interval_seconds``: held at most
    :data:`COMMIT_HOLD_SECONDS`, at most :data:`MAX_COMMIT_TICKS` of them."""
    return 1 + min(MAX_COMMIT_TICKS - 1, int(COMMIT_HOLD_SECONDS // interval_seconds))


class ScrapeLoop:
    """Runs the per-target schedules and the writer; :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        scraper: Scraper,
        targets: Callable[[], Sequence[Target]],
        write: Callable[[Sequence[ScrapeOutcome]], object],
        interval_seconds: float,
        *,
        on_fatal: Callable[[str], None],
        max_pending_samples: int = 1_000_000,
        group_seconds: float = 0.5,
        max_group_samples: int = 100_000,
        cpu_share: float = DEFAULT_SHARE,
        commit_ticks: int = 1,
        max_skip: int = MAX_SKIP,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scraper, self.targets, self.write = scraper, targets, write
        self.interval = interval_seconds
        self.on_fatal = on_fatal
        self.max_pending_samples = max_pending_samples
        #: A group (one transaction) closes when the tick's scrapes are all in, or after
        #: this long, or at ``max_group_samples``. A commit costs ~10 ms whatever its size,
        #: so on a starved CPU, where a tick's pages are parsed over hundreds of
        #: milliseconds, a short wait splits a tick into many small, costly transactions.
        self.group_seconds = min(group_seconds, interval_seconds / 2)
        self.max_group_samples = max_group_samples
        #: Groups (ticks) committed together: the writer holds a closed group until this
        #: many are in, or until the first held has waited ``commit_ticks - 0.5`` intervals
        #: (a target that stops never strands its last pages), or at ``max_group_samples``;
        #: the first group is written at once (readiness waits for a commit).
        #: Nothing held is acknowledged (target health, ``samples_stored``) before it is
        #: committed; a SIGKILL loses what is held (docs/storage.md, "Ingest").
        self.commit_ticks = max(1, commit_ticks)
        self._written = False
        #: The writer's clock for a group's and a hold's deadlines (a test freezes it, so
        #: that only the tick count closes a hold, whatever the machine's load).
        self.monotonic = monotonic
        #: Each target's share of the interval for parsing
        # (gpuscope/collector/scraping/cpu_budget.py).
        self.cpu_share = cpu_share
        #: The most ticks a target gives away after one page, however costly.
        self.max_skip = max_skip
        #: Ticks skipped per target for going over its CPU budget, since the start.
        self.skipped: dict[str, int] = {}
        #: Outcomes for the writer; None is a wake-up: the last scrape in flight has ended.
        self._queue: queue.Queue[ScrapeOutcome | None] = queue.Queue()
        self._pending = 0
        #: Scrapes started and not yet handed over: a group is complete when none is left.
        self._in_flight = 0
        self._pending_lock = threading.Lock()
        self._stopping = threading.Event()
        #: Set when the scraping thread's loop has ended: no outcome comes after it.
        self._loop_ended = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        ready = threading.Event()
        scraping = threading.Thread(target=self._run_loop, args=(ready,), name="scrape-loop")
        writing = threading.Thread(target=self._run_writer, name="ingest-writer")
        self._threads = [scraping, writing]
        for t in self._threads:
            t.daemon = True
            t.start()
        ready.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop scheduling, let scrapes in flight end, store what is queued."""
        self._stopping.set()
        loop, stop = self._loop, self._stop_event
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(stop.set)
        for t in self._threads:
            t.join(timeout)

    # -- the scraping side (event loop thread) ---------------------------------------------
    def _run_loop(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        finally:
            loop.close()
            self._loop_ended.set()
            self._queue.put(None)  # wakes the writer to store what is queued and end

    async def _main(self, ready: threading.Event) -> None:
        self._stop_event = stop = asyncio.Event()
        ready.set()
        tasks: dict[str, asyncio.Task[None]] = {}
        async with self.scraper.client() as client:
            while not stop.is_set() and not self._stopping.is_set():
                wanted = {t.url: t for t in self.targets()}
                for url in list(tasks):
                    if url not in wanted:
                        tasks.pop(url).cancel()
                self.scraper.forget(list(wanted.values()))
                client.keep(t.fetch_url for t in wanted.values())
                for url, target in wanted.items():
                    if url not in tasks or tasks[url].done():
                        tasks[url] = asyncio.create_task(self._target_loop(client, target))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=TARGETS_REFRESH_SECONDS)
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    async def _target_loop(self, client: Client, target: Target) -> None:
        now = time.time()
        tick = float(math.ceil(now))  # the first scrape at once, on a whole second
        skipped = 0
        while True:
            await asyncio.sleep(max(tick - now, 0.0))
            with self._pending_lock:
                self._in_flight += 1
            skip = 0
            try:
                outcome = await self.scraper.scrape_one(client, target)
                skip = ticks_to_skip(
                    outcome.cost_seconds, self.interval, self.cpu_share, self.max_skip
                )
                self._offer(outcome.at_tick(tick, skipped))
            except Exception:  # a bug, not a target's fault: log it, keep the schedule
                log.exception("scrape failed target=%s", target.url)
            finally:
                with self._pending_lock:
                    self._in_flight -= 1
                    last = self._in_flight == 0
                if last:  # the writer closes its group now, without polling for it
                    self._queue.put(None)
            if skip:  # over its CPU budget: its next ticks go to the other targets
                self.skipped[target.url] = self.skipped.get(target.url, 0) + skip
                log.info(
                    "target over its CPU budget; ticks skipped target=%s cpu_s=%.3f cost_s=%.3f "
                    "skip=%d", target.url, outcome.cpu_seconds, outcome.cost_seconds, skip,
                )  # fmt: skip
            now = time.time()
            tick, skipped = next_tick(tick, now, self.interval)
            # ticks given up for the CPU budget are skipped ticks too (counted on the next
            # outcome), so every tick stays accounted for
            tick += skip * self.interval
            skipped += skip

    def _offer(self, outcome: ScrapeOutcome) -> None:
        n = outcome.samples
        with self._pending_lock:
            full = n and self._pending + n > self.max_pending_samples
            if not full:
                self._pending += n
        if full:
            dropped = {**outcome.dropped, STORE_BACKLOG: n}
            outcome = dataclasses.replace(outcome, batch=None, dropped=dropped)
            log.warning(
                "store backlog full; page dropped target=%s samples=%d", outcome.target.url, n
            )
        self._queue.put(outcome)

    # -- the writing side (writer thread) --------------------------------------------------
    def _run_writer(self) -> None:
        held: list[ScrapeOutcome] = []
        groups, due = 0, math.inf  # held groups; when the first held must be written
        while True:
            wait = WRITER_WAKE_SECONDS if not held else max(0.0, due - self.monotonic())
            try:  # woken by an outcome, or by None (a tick's last scrape, or the end)
                first = self._queue.get(timeout=wait)
            except queue.Empty:
                first = None
            if first is None:
                ended = self._loop_ended.is_set() or not self._threads[0].is_alive()
                stopping = self._stopping.is_set() and ended and self._queue.empty()
                if held and (stopping or self.monotonic() >= due):
                    if not self._commit(held):
                        return
                    held, groups, due = [], 0, math.inf
                if stopping:
                    return
                continue
            group = [first]
            samples = first.samples
            deadline = self.monotonic() + self.group_seconds
            while (left := deadline - self.monotonic()) > 0 and samples < self.max_group_samples:
                if self._queue.empty() and self._in_flight == 0:
                    break  # every scrape of the tick is in: waiting longer only delays it
                try:
                    got = self._queue.get(timeout=left)
                except queue.Empty:
                    continue
                if got is None:  # a wake-up: look again whether every scrape is in
                    continue
                group.append(got)
                samples += got.samples
            if not held:
                due = self.monotonic() + (self.commit_ticks - 0.5) * self.interval
            held += group
            groups += 1
            full = sum(o.samples for o in held) >= self.max_group_samples
            if groups >= self.commit_ticks or full or not self._written or self.monotonic() >= due:
                if not self._commit(held):
                    return
                held, groups, due = [], 0, math.inf

    def _commit(self, outcomes: list[ScrapeOutcome]) -> bool:
        """Store ``outcomes`` in one transaction; False when the store has failed for good."""
        with self._pending_lock:
            self._pending -= sum(o.samples for o in outcomes)
        self._written = True  # the first tick alone: readiness does not wait for a hold
        try:
            self.write(outcomes)
        except StoreFailed as exc:
            self.on_fatal(str(exc))
            return False
        except Exception:  # a bug: logged, and the next group is tried
            log.exception("storing scraped pages failed")
        return True
