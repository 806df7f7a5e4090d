"""The weekly report's inputs, read from the store in two lanes side by side.

The *use* lane is DuckDB over the samples: the fortnight's GPU-hours per pod and hour
(``hourly_use``, the heavy part), the pods, capacity, guarantees and actions. The
*allocation* lane is mostly Python over the inventory: the week's allocation states
(fragmentation, topology), the What-if replays, the IB hot ports and the hours over quota.
DuckDB releases the GIL while it runs, so on the 2 cores of the 10,000-GPU benchmark the
two lanes together took 22 s where one after the other took 29 s (docs/scale.md). Each
lane has a connection of its own (the allocation lane a cursor of the caller's); the
use lane keeps the caller's, which holds the temp table ``report_held``.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from gpuscope.analytics.detectors.idle_gaps import MAX_BRIDGED_GAP
from gpuscope.analytics.queueing.quota import over_quota_hours
from gpuscope.analytics.report.fragmentation import fragmentation_over
from gpuscope.analytics.report.idle_policies import idle_policies_over
from gpuscope.analytics.report.sql import Q, frame, run
from gpuscope.analytics.report.states import week_states
from gpuscope.analytics.report.topology import topology_over
from gpuscope.analytics.report.week import Week
from gpuscope.analytics.report.whatif import whatif_over
from gpuscope.analytics.report.whatif_capacity import whatif_capacity_over
from gpuscope.analytics.report.whatif_topology import whatif_topology_over
from gpuscope.analytics.whatif.history import read_history
from gpuscope.collector.storage.writer_log import seen_bound
from gpuscope.core.gpu_prices import estimated_price
from gpuscope.core.owners import pod_owner
from gpuscope.core.settings import Settings

EPOCH = datetime(1970, 1, 1)
#: hourly_use judges the range about this many 5-minute pieces at a time (a day of
#: 10,000 GPUs is 2.9 M); each query costs ~30 ms however small, so a small cluster's
#: fortnight is one query ...
PIECES_PER_CHUNK = 3_000_000
#: ... with this much on either side: a gap is bridged only when the buckets with data on
#: its two sides are at most MAX_BRIDGED_GAP apart, so farther ones never change a verdict
GAP_MARGIN = MAX_BRIDGED_GAP + timedelta(minutes=10)


def with_owner(pods: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``owner`` from each pod's owner label (the first of ``keys`` it has), else its
    controller (``StatefulSet/nb-user05``), else empty; the columns it came from dropped."""
    owners = [
        pod_owner(labels, keys, kind, name)
        for labels, kind, name in pods.select("pod_labels", "owner_kind", "owner_name").iter_rows()
    ]
    return pods.drop("pod_labels", "owner_kind", "owner_name").with_columns(
        pl.Series("owner", owners, dtype=pl.String)
    )


def chunk_for(gpus: int) -> timedelta:
    """How much of the range ``hourly_use`` judges at once for ``gpus`` GPUs held: whole
    days, at least one (a day of 10,000 GPUs, measured fastest against two and 3.5), at
    most the fortnight."""
    days = PIECES_PER_CHUNK // max(1, gpus * 288)
    return timedelta(days=min(14, max(1, days)))


def hourly_use(
    con: duckdb.DuckDBPyConnection, params: dict[str, Any], chunk: timedelta | None = None
) -> pl.DataFrame:
    """``hourly_use`` over [$lo, $end), ``chunk`` of hours at a time (hours aligned; None:
    sized by :func:`chunk_for` for the GPUs held), each chunk judged with
    :data:`GAP_MARGIN` of buckets either side: a chunk's pieces, not the fortnight's, are
    in memory at once, and the answer is the one-query answer (a gap's neighbours past the
    margin are too far apart for it to be bridged either way).
    The report's temp table ``report_held`` must exist (:func:`create_held`)."""
    lo, end = params["lo"], params["end"]
    if chunk is None:
        chunk = chunk_for(int(con.execute(Q["held_gpus"]).fetchall()[0][0]))
    cuts = [lo]
    hour = lo.replace(minute=0, second=0, microsecond=0)
    while (hour := hour + chunk) < end:
        cuts.append(hour)
    cuts.append(end)
    # the first chunk's hours start at the 5-minute bucket holding $lo (a window from
    # 10:37 has a piece in the 10:35 bucket); reads still start at $lo, as in one query
    cuts[0] = lo - timedelta(seconds=(lo - EPOCH).total_seconds() % 300)
    seen = seen_bound(lo)  # series.last_seen lags a series' newest sample (writer_log.py)
    frames = []
    for c0, c1 in itertools.pairwise(cuts):
        # past the range's own edges too: a gap there is judged by what is on its far side
        r0, r1 = c0 - GAP_MARGIN, c1 + GAP_MARGIN
        cut = {"c0": c0, "c1": c1, "r0": r0, "r1": r1, "seen_lo": seen}
        frames.append(frame(con, Q["hourly_use"], **params, **cut))
    return pl.concat(frames)


@dataclass(frozen=True, slots=True)
class UseInputs:
    """What the use lane read: GPU-hours per hour and pod over the fortnight (``hourly``),
    the week's pods with their owners, capacity per hour, guarantees, actions, and the
    estimated price per GPU-hour (None unless the site set none and estimates are on)."""

    hourly: pl.DataFrame
    pods: pl.DataFrame
    capacity: pl.DataFrame
    guarantees: pl.DataFrame
    actions: pl.DataFrame
    estimated_price: float | None
    #: GPUs held in the range whose data are fleet summaries (docs/scale.md): their
    #: "used" takes each GPU at its workload's GPUs' mean utilization
    summary_gpus: float = 0.0


@dataclass(frozen=True, slots=True)
class AllocationInputs:
    """What the allocation lane computed: the sections built from the week's allocation
    states and What-if replays, the IB hot ports and the hours each project was over its
    quota."""

    fragmentation: pl.DataFrame
    topology_slots: pl.DataFrame
    topology_domains: pl.DataFrame
    whatif: tuple[pl.DataFrame, pl.DataFrame, str, str]
    whatif_topology: tuple[pl.DataFrame, str]
    whatif_capacity: tuple[pl.DataFrame, str]
    ib: pl.DataFrame
    #: the idle-policy replay's table and headline (report/idle_policies.py)
    idle_policies: tuple[pl.DataFrame, str]
    #: per project: (GPU-hours over its guarantee, hours over it)
    over_quota: dict[str, tuple[float, float]]


def read_inputs(
    con: duckdb.DuckDBPyConnection, week: Week, settings: Settings, params: dict[str, Any]
) -> tuple[UseInputs, AllocationInputs]:
    """Both lanes' inputs for ``week``, the allocation lane in a worker thread on a cursor
    of ``con`` while the use lane runs on ``con``; an error in either is raised here once
    both have stopped."""
    with ThreadPoolExecutor(1, thread_name_prefix="report-allocation") as pool:
        allocation = pool.submit(_allocation_lane, con.cursor(), week, settings, params)
        use = _use_lane(con, settings, params)
        return use, allocation.result()


def create_held(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> None:
    """The temp table ``report_held``: who held which GPU over [$lo, $end) and
    :data:`GAP_MARGIN` either side, where ``hourly_use`` finds the far side of a gap at the
    range's edge (a notebook idle before and after a gap that ends at the report's end is
    idle through it, as the idle detector says, not unknown because the range stops)."""
    run(
        con,
        Q["create_held"],
        **params,
        held_lo=params["lo"] - GAP_MARGIN,
        held_end=params["end"] + GAP_MARGIN,
    )


def _use_lane(
    con: duckdb.DuckDBPyConnection, settings: Settings, params: dict[str, Any]
) -> UseInputs:
    create_held(con, params)
    try:
        hourly = hourly_use(con, params)
        pods = with_owner(frame(con, Q["pods"], **params), settings.workloads.owner_label_keys)
        summary_gpus = float(con.execute(Q["held_gpus"]).fetchall()[0][1])
    finally:
        con.execute("DROP TABLE IF EXISTS report_held")
    rs = settings.report
    price = None
    if rs.price_per_gpu_hour is None and rs.estimate_cost:
        models = frame(con, Q["gpu_models"], **params)
        price = estimated_price(dict(models.iter_rows()), rs.gpu_hour_prices)
    return UseInputs(
        hourly=hourly,
        pods=pods,
        capacity=frame(con, Q["capacity"], **params),
        guarantees=frame(con, Q["guarantees"], **params),
        actions=frame(con, Q["actions"], **params),
        estimated_price=price,
        summary_gpus=summary_gpus,
    )


def _allocation_lane(
    cur: duckdb.DuckDBPyConnection, week: Week, settings: Settings, params: dict[str, Any]
) -> AllocationInputs:
    an = settings.analytics
    try:
        states = list(week_states(cur, week))  # read once for both sections
        fragmentation = fragmentation_over(cur, week, an, states)
        slots, domains = topology_over(cur, week, an, settings.report.top_n, states)
        del states
        # the lane's heavy queries before the What-if replays: DuckDB hands their memory
        # back within a second, so the replays (Python, seconds) and the page after them
        # are never on top of it, nor these queries on top of what the replays leave
        ib = frame(cur, Q["ib_hot_ports"], **params, seen_start=seen_bound(params["start"]))
        idle_policies = idle_policies_over(cur, week, settings)
        over_quota = over_quota_hours(cur, week.start, week.end)
        history = read_history(cur, week.start, week.end)
        return AllocationInputs(
            fragmentation=fragmentation,
            topology_slots=slots,
            topology_domains=domains,
            whatif=whatif_over(cur, week, an, history=history),
            whatif_topology=whatif_topology_over(history, an),
            whatif_capacity=whatif_capacity_over(history, an),
            ib=ib,
            idle_policies=idle_policies,
            over_quota=over_quota,
        )
    finally:
        cur.close()
