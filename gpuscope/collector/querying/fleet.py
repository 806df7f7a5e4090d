"""Fleet mode: ask the metrics engine for 5-minute summaries instead of copying raw series.

With ``collector.prometheus_url`` set (and ``collector.query.mode: fleet``, the default),
every cycle asks the engine, for each closed 5-minute bucket, the questions the detectors
need, as PromQL that Prometheus, Thanos, Mimir and VictoriaMetrics all answer:

- per node, the agents present (``count by (node)``): the shards are built from it;
- per GPU (and per workload on it) the busy signals' peak (``max_over_time``): a bucket is
  busy for the idle detector exactly when any of its samples was;
- per GPU and workload the memory used, power and clocks' mean (``avg_over_time``);
- the counters (InfiniBand bytes, waits and errors per port and direction, NVLink/PCIe
  bytes, energy, ECC) and the inventory gauges (``gpuscope_gpu_info``, the workload info,
  port line rate) as their value at the bucket's end: the store turns counters into
  increases, so a bucket holds its 5-minute increase and the rate over line rate is the
  bandwidth detector's own arithmetic.

Each answer is stored as one sample per series per bucket, at the bucket's last second
(``start + 299``, where the engine evaluated it), under the agent's own metric names and
labels. That time is what the store's conventions need: a counter's stored increase is
then the traffic of the bucket, ending at its time; a peak is dated no earlier than it could
have happened (idle is never called early); and the sample falls in its own bucket, so the
store's coarse-series rule makes those samples the 5-minute roll-up itself
(docs/storage.md). Idle, bandwidth, quota, the report, alerts, actions and the what-if read
them unchanged, at 5-minute resolution (docs/scale.md says what that changes).

Queries are sharded by a hash of the node name (``shards`` shards, each a ``node=~``
regex), so none returns the whole fleet; each shard has its own
:class:`~gpuscope.collector.querying.step_window.StepWindow` on the 5-minute grid (a shard that
failed is asked again alone, nothing is stored twice) and its own timeouts and retries
(:class:`~gpuscope.collector.querying.query_client.QueryClient`). With ``recording_rules`` the
engine's precomputed ``gpuscope:*`` series (dashboards/rules/gpuscope-fleet-rules.yaml)
are read instead of the ``*_over_time`` questions, which are still asked for a node's
bucket the rules did not reach (:mod:`~gpuscope.collector.querying.rule_gaps`). What is
asked, and the shards, are :mod:`~gpuscope.collector.querying.fleet_questions`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from gpuscope.collector.querying.fleet_questions import (
    BUCKET_S,
    LAST,
    NODES_QUERY,
    RULE_NAMES,
    SUMMARIZED,
    node_regex,
    over_time_questions,
    shard_of,
)
from gpuscope.collector.querying.fleet_summaries import (
    GAUGE_TYPES,
    reshape,
    summary_questions,
)
from gpuscope.collector.querying.promql import LabelCache, batches_from_matrix, matrix_result
from gpuscope.collector.querying.query_client import DeadlinePassed, QueryClient, QueryRefused
from gpuscope.collector.querying.rule_gaps import fill_rule_gaps, rule_gaps
from gpuscope.collector.querying.shard_state import ShardState
from gpuscope.collector.querying.step_window import StepWindow
from gpuscope.collector.scraping.batch import Batch
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)


@dataclass
class FleetSource:
    client: QueryClient
    shards: int = 8
    recording_rules: bool = False
    #: Ask per-workload, per-node and hot-port summaries instead of per-GPU series
    #: (:mod:`gpuscope.collector.querying.fleet_summaries`).
    summaries: bool = False
    #: With ``summaries``: what changes only, where the detectors allow it
    #: (:func:`~gpuscope.collector.querying.fleet_summaries.summary_questions`).
    changes_only: bool = False
    #: With ``summaries``: GPU-link floors in bytes/s (``fleet_summaries.gpu_link_floors``).
    link_floors: dict[str, float] | None = None
    latency_offset: float = 30.0
    max_buckets_per_query: int = 12
    max_lag_buckets: int = 288
    #: Shards asked at once (each in its own thread; the store is written from the cycle's).
    concurrency: int = 4
    windows: dict[int, StepWindow] = field(default_factory=dict)
    state: dict[int, ShardState] = field(default_factory=dict)
    labels: LabelCache = field(default_factory=LabelCache)
    cycles: int = 0
    #: With ``recording_rules``: (node, bucket) pairs with no rule result when asked that
    #: the raw series filled, asked as ``*_over_time`` (:func:`rule_gaps`).
    rule_gaps_filled: int = 0
    #: The clock a cycle's ``deadline`` is on (``time.monotonic``; injected in tests).
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        for s in range(self.shards):
            self.windows.setdefault(s, self._window())
            self.state.setdefault(s, ShardState())

    def _window(self) -> StepWindow:
        return StepWindow(
            BUCKET_S,
            latency_offset=self.latency_offset,
            max_steps_per_query=self.max_buckets_per_query,
            max_lag_steps=self.max_lag_buckets,
            final_after=2 * BUCKET_S,
        )

    @property
    def shown_url(self) -> str:
        return self.client.shown_url

    def newest_bucket(self, now: float) -> float:
        """The start of the newest bucket closed (and past the latency offset) at ``now``."""
        return self.windows[0].newest(now - BUCKET_S)

    def cycle(
        self,
        now: float,
        store: Callable[[int, Batch, float], object],
        *,
        deadline: float | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> FleetCycle:
        """Ask every shard for its buckets not yet stored, up to ``concurrency`` shards at
        once, and store each bucket as its shard's answer arrives: ``store(shard, batch,
        cursor)`` must commit the batch and the shard's cursor after it (``cursor``, the
        next bucket to ask) in one transaction, so a kill at any point neither repeats nor
        loses a bucket. A failing shard is left for the next cycle (its error in the
        result, ``on_error`` told at once), the others go on. Nothing is sent after
        ``deadline`` (``time.monotonic()``): shards not answered by then are left for the
        next cycle, which asks the shards most behind first (of two as far behind, the
        one asked longer ago)."""
        out = FleetCycle()
        self.cycles += 1
        # bucket starts: the window's grid is of starts; evaluation is at start + 299 s
        plans = {s: p for s, w in self.windows.items() if (p := w.next(now - BUCKET_S))}
        if not plans:
            return out
        lo = min(p[0] for p in plans.values())
        hi = max(p[1] for p in plans.values())
        try:
            nodes = self._nodes(lo, hi, deadline)
        except SourceError as exc:
            for s in plans:
                self.state[s].enter("not_asked", now, f"node list: {exc}")
            raise
        by_shard: dict[int, list[str]] = {}
        for node in nodes:
            by_shard.setdefault(shard_of(node, self.shards), []).append(node)
        order = sorted(plans, key=lambda s: (plans[s][0], self.state[s].asked_in, s))

        def ask(s: int) -> list[Batch] | None:
            # A shard's turn may come after the deadline (the pool starts the next one as
            # soon as a worker is free): it is not asked then, and says so (``None``),
            # instead of failing at once as if the engine had not answered.
            if deadline is not None and self.monotonic() >= deadline:
                return None
            self.state[s].enter("asking", now)
            self.state[s].asked_in = self.cycles
            start, end = plans[s]
            try:
                members = by_shard.get(s, [])
                return self._ask(members, start, end, self.target(s), deadline) if members else []
            except SourceError as exc:
                timed_out = isinstance(exc, DeadlinePassed) or "no answer within" in str(exc)
                self.state[s].enter("timed_out" if timed_out else "failed", now, str(exc))
                if on_error is not None:
                    on_error(str(exc))
                raise

        pool = ThreadPoolExecutor(max(1, self.concurrency), thread_name_prefix="fleet-shard")
        pending = {pool.submit(ask, s): s for s in order}
        left_out: list[int] = []  # their turn came after the deadline
        try:
            while pending:
                left = None if deadline is None else max(0.0, deadline - self.monotonic())
                done, _ = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
                if not done:
                    break  # the deadline: what is not answered waits for the next cycle
                for fut in done:
                    s = pending.pop(fut)
                    if fut.exception() is None and fut.result() is None:
                        left_out.append(s)
                        continue
                    self._answered(s, plans[s], fut, now, store, out, by_shard.get(s, []))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for s in [*pending.values(), *left_out]:
            # asked and not answered, or never asked (still queued, or its turn came after
            # the deadline: it returns without asking)
            state = self.state[s]
            if state.state == "asking":
                state.enter("timed_out", now, "no answer before the cycle's deadline")
            else:
                state.enter("not_asked", now, "the cycle's deadline came first")
        pending_n = len(pending) + len(left_out)
        if pending_n:
            # first: what the cycle as a whole came to, before any one shard's error
            out.errors.insert(
                0,
                f"query API {self.shown_url}: cycle deadline passed with "
                f"{pending_n} of {len(plans)} shards unanswered (left for the next cycle)",
            )
        return out

    def _answered(
        self,
        s: int,
        plan: tuple[float, float],
        fut: Future[list[Batch] | None],
        now: float,
        store: Callable[[int, Batch, float], object],
        out: FleetCycle,
        members: Sequence[str],
    ) -> None:
        """One shard's answer (or failure): its buckets stored, each with its cursor."""
        window, (start, end) = self.windows[s], plan
        try:
            batches = fut.result() or []  # None (not asked) never comes here
        except QueryRefused as exc:
            window.refused(round((end - start) / BUCKET_S) + 1)
            out.errors.append(str(exc))
            return
        except SourceError as exc:
            out.errors.append(str(exc))
            return
        before = window.cursor
        for b in batches:
            after = b.ts_ms / 1000 - (BUCKET_S - 1) + BUCKET_S
            store(s, b, after)
            window.cursor = max(window.cursor or after, after)
            out.samples += len(b)
        steps = {b.ts_ms / 1000 - (BUCKET_S - 1) for b in batches}
        if not members:  # nothing to ask there: the steps are done, not missing
            steps = {start + k * BUCKET_S for k in range(round((end - start) / BUCKET_S) + 1)}
        window.cursor = before
        window.answered(start, end, steps, now - BUCKET_S)
        if window.cursor is not None and before is not None:
            out.buckets += round((window.cursor - before) / BUCKET_S)
        self.state[s].enter("ok", now)

    def _nodes(self, lo: float, hi: float, deadline: float | None) -> list[str]:
        data = self.client.query("/api/v1/query_range", self._range(
            NODES_QUERY.format(w=BUCKET_S), lo, hi), deadline=deadline)  # fmt: skip
        nodes: set[str] = set()
        for r in matrix_result(data, self.shown_url):
            metric = r.get("metric")
            if isinstance(metric, dict) and "node" in metric:
                nodes.add(str(metric["node"]))
        return sorted(nodes)

    @staticmethod
    def _range(query: str, start: float, end: float) -> dict[str, str]:
        """A range query whose points fall on each bucket's last second: ``[300s]`` there
        covers the bucket's samples (whole-second times ``start .. start + 299``)."""
        return {
            "query": query,
            "start": f"{start + BUCKET_S - 1:.0f}",
            "end": f"{end + BUCKET_S - 1:.0f}",
            "step": f"{BUCKET_S}",
        }

    def questions(self, nodes: Sequence[str]) -> list[tuple[str, str | None]]:
        """``(PromQL, stored name or None when the answer keeps its own names)`` for one
        shard of nodes."""
        sel = f'node=~"{node_regex(nodes)}"'
        last = "|".join(LAST)
        out: list[tuple[str, str | None]] = [(f'{{__name__=~"{last}",{sel}}}', None)]
        if self.recording_rules:
            names = "|".join(re.escape(n) for n in RULE_NAMES).replace("\\", "\\\\")
            out.append((f'{{__name__=~"{names}",{sel}}}', None))
            return out
        return out + over_time_questions(sel)

    def target(self, shard: int) -> str:
        """The target a shard's batches are stored under: the store keeps workload
        intervals per target, so each shard must be its own (or one shard's bucket would
        close the others' workloads)."""
        return f"{self.shown_url}#shard={shard}/{self.shards}"

    def _ask(
        self,
        nodes: Sequence[str],
        start: float,
        end: float,
        target: str,
        deadline: float | None = None,
    ) -> list[Batch]:
        """Every question for one shard over buckets ``start..end``: one batch a bucket."""
        if self.summaries:
            return self._ask_summaries(nodes, start, end, target, deadline)
        buckets = self._ask_questions(self.questions(nodes), start, end, target, deadline)
        if self.recording_rules:
            self._fill_rule_gaps(buckets, target, deadline)
        return buckets

    def _ask_questions(
        self,
        questions: Sequence[tuple[str, str | None]],
        start: float,
        end: float,
        target: str,
        deadline: float | None,
    ) -> list[Batch]:
        """``questions`` (as :meth:`questions` gives them) over buckets ``start..end``: one
        batch a bucket."""
        merged: dict[int, Batch] = {}
        for query, name in questions:
            params = self._range(query, start, end)
            data = self.client.query("/api/v1/query_range", params, deadline=deadline)
            result = matrix_result(data, self.shown_url)
            if name is not None:
                for r in result:
                    if isinstance(r.get("metric"), dict):
                        r["metric"]["__name__"] = name  # type: ignore[index]
            name_of = None if name is not None else {**RULE_NAMES, **{m: m for m in LAST}}
            for b in batches_from_matrix(result, target, name_of=name_of, cache=self.labels):
                into = merged.setdefault(b.ts_ms, Batch(b.target, b.ts_ms, types=b.types))
                into.names.extend(b.names)
                into.labels.extend(b.labels)
                into.values.extend(b.values)
        return [merged[ts] for ts in sorted(merged)]

    def _fill_rule_gaps(self, buckets: list[Batch], target: str, deadline: float | None) -> None:
        """Where a bucket has a node's GPUs but no result of the rules for it (the engine's
        rule evaluator was behind, restarted or down for that bucket: its evaluations are
        never made up afterwards), that node's summaries are asked as ``*_over_time`` over
        the raw series, as without recording rules, so no bucket is stored without them."""
        gaps = rule_gaps(buckets, SUMMARIZED)
        if not gaps:
            return
        nodes = sorted(set().union(*gaps.values()))
        starts = [ts / 1000 - (BUCKET_S - 1) for ts in gaps]
        sel = f'node=~"{node_regex(nodes)}"'
        asked = self._ask_questions(
            over_time_questions(sel), min(starts), max(starts), target, deadline
        )
        filled = fill_rule_gaps(buckets, gaps, asked)
        if filled:
            self.rule_gaps_filled += filled
            log.warning(
                "recording rules missing for %d node buckets (buckets=%d); asked as "
                "*_over_time instead target=%s", filled, len(gaps), target,
            )  # fmt: skip

    def _ask_summaries(
        self,
        nodes: Sequence[str],
        start: float,
        end: float,
        target: str,
        deadline: float | None,
    ) -> list[Batch]:
        """The summaries' questions for one shard over buckets ``start..end``."""
        merged: dict[int, Batch] = {}
        sel, floors = f'node=~"{node_regex(nodes)}"', self.link_floors
        questions = summary_questions(sel, changes_only=self.changes_only, link_floors=floors)
        keep = {m: m for m in LAST}
        for q in questions:
            params = self._range(q.query, start, end)
            data = self.client.query("/api/v1/query_range", params, deadline=deadline)
            result = reshape(q, matrix_result(data, self.shown_url))
            name_of = None if q.name is not None else keep
            for b in batches_from_matrix(result, target, name_of=name_of, cache=self.labels):
                into = merged.setdefault(b.ts_ms, Batch(b.target, b.ts_ms, types=b.types))
                into.types.update(GAUGE_TYPES)
                into.names.extend(b.names)
                into.labels.extend(b.labels)
                into.values.extend(b.values)
        return [merged[ts] for ts in sorted(merged)]


@dataclass
class FleetCycle:
    samples: int = 0
    buckets: int = 0
    errors: list[str] = field(default_factory=list)
