"""Fleet summaries: what fleet mode asks when ``collector.query.summaries`` is on.

Why: fleet mode as first built stored every GPU's ~24 series a bucket, so the collector's
memory, CPU and disk grew with every GPU (issue 40: 1.1 GB peak RSS at 30,000 GPUs). With
summaries the engine aggregates where the data already lives and the collector stores what
the detectors decide on, whose count grows with workloads, nodes and *problems*, not GPUs:

- per workload (node, namespace, pod, container): its busy peak in the bucket (the highest
  busy signal of any GPU it holds: DCGM SM activity where the GPU has it, else NVML
  utilization), its GPUs' mean NVML utilization (:data:`UTILIZATION_MEAN`: the mean over
  the bucket and over the GPUs it holds, so the weekly report's "used", which takes it for
  each GPU the workload holds, sums to what the GPUs' own series give; the busy peak is
  SM activity where there is some, and a peak: neither is a GPU's mean utilization), its
  own per-process utilization peak and memory mean, and the GPUs it
  holds; for GPUs shared by more than one workload (fractions), which workload holds which
  GPU (``gpuscope:shared_gpu_workload_info``: packing fractions onto GPUs needs it, whole
  GPUs are counted). Stored under the agent's own names with ``uuid`` set to the workload's key
  (``workload:<namespace>/<pod>/<container>``), so the idle detector judges a workload
  as one "GPU" that is busy when any of its GPUs was, exactly the rule it applies per GPU
  (a workload is idle when every GPU it holds is), and the GPUs it holds ride in the
  ``gpu`` label of its ``gpuscope_gpu_workload_info`` summary;
- per node: GPUs present, healthy, held by a workload, and utilization mean and peak
  (``gpuscope:node_*``: the mean is the GPUs' means' mean, the API's utilization by
  cluster and node reads it; with ``changes_only`` only where they differ from the bucket
  before, and every node in each hour's last bucket);
- per InfiniBand port, only ports over :data:`HOT_PORT_FLOOR` of their line rate in the
  bucket (either direction): both directions' bucket increase, the transmit wait and the
  line rate; ports with errors only, their errors' increase; GPUs reported down, and
  GPUs whose ECC errors grew. The bandwidth detector's own hot line (``ib_hot_ratio``,
  0.8) is above the floor, so no port it would call hot is left out;
- per GPU link (NVLink, PCIe), only GPUs whose link carried, in either direction, more
  than a floor in bytes/s in the bucket (:func:`gpu_link_floors`: :data:`HOT_LINK_FLOOR`
  of the smallest capacity configured for the metric, so one constant a metric and no
  per-model mapping in the engine): both directions' bucket increase, each carrying its
  GPU's ``model`` from ``gpuscope_gpu_info`` (``group_left``: the detector reads the real
  capacity from it; no ``gpuscope_gpu_info`` series is stored for them).

Increases are asked of the engine (``increase(...[300s])``) and stored as gauges under the
counters' names: a stored counter sample is already its bucket's increase (docs/storage.md),
so the detectors read them unchanged. Per-GPU series are not stored; a finding's drill-down
asks the engine for them (:mod:`gpuscope.collector.querying.drilldown`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import AnalyticsSettings

#: A port is kept in a bucket when either direction carried at least this share of its
#: line rate there (the bandwidth detector's ``ib_hot_ratio`` must not be below it).
HOT_PORT_FLOOR = 0.5
#: A GPU link is kept in a bucket when either direction carried at least this share of
#: the smallest capacity configured for its metric (``gpu_link_hot_ratio`` must not be
#: below it: :func:`gpu_link_floors` refuses).
HOT_LINK_FLOOR = 0.5
#: The GPU link counters and the analytics settings holding their capacities by model.
GPU_LINK_CAPACITIES = {
    "gpuscope_gpu_nvlink_bytes_total": "nvlink_bytes_per_second",
    "gpuscope_gpu_pcie_bytes_total": "pcie_bytes_per_second",
}
#: The uuid a workload's summary series carry: one key per (namespace, pod, container).
WORKLOAD_KEY_PREFIX = "workload:"
#: The name a workload's GPUs' mean NVML utilization in the bucket is stored under.
UTILIZATION_MEAN = "gpuscope:workload_utilization_mean"
WORKLOAD_BY = "node, namespace, pod, container"
PORT_ON = "on (node, device, port)"
W = "[300s]"
#: The bucket before, in a selector (``x{S}[300s] offset 300s``).
OFFSET = " offset 300s"
#: Change-only series are stored whole in each hour's last bucket (its evaluation time's
#: second of the hour is 3599, at or past this).
HOUR_S = 3600
KEYFRAME_AT = HOUR_S - 300

#: Counters whose summaries are their bucket's increase, stored as gauges under their names.
INCREASES = (
    "gpuscope_ib_transmit_bytes_total",
    "gpuscope_ib_receive_bytes_total",
    "gpuscope_ib_transmit_wait_total",
    "gpuscope_ib_errors_total",
    "gpuscope_gpu_ecc_errors_total",
    *GPU_LINK_CAPACITIES,
)
#: Every summary is stored as given (a gauge): increases included.
GAUGE_TYPES = {name: "gauge" for name in INCREASES}


@dataclass(frozen=True)
class SummaryQuestion:
    """One PromQL question of a shard and how its answer is stored.

    ``name``: the metric name stored (``None``: the answer keeps its own ``__name__``);
    ``workload_key``: the answer's ``uuid`` becomes its workload's key; ``count_in_gpu``:
    the value (a GPU count) moves into the ``gpu`` label and the stored value is 1."""

    query: str
    name: str | None
    workload_key: bool = False
    count_in_gpu: bool = False


def workload_key(namespace: str, pod: str, container: str) -> str:
    """The key a workload's summaries are stored under (the idle detector's "uuid")."""
    return f"{WORKLOAD_KEY_PREFIX}{namespace}/{pod}/{container}"


def _per_workload(per_gpu: str, held: str, how: str = "max") -> str:
    """A per-(node, uuid) answer over the GPUs each workload holds: their highest value
    (``how`` "max") or their mean ("avg")."""
    return f"{how} by ({WORKLOAD_BY}) ({per_gpu} * on (node, uuid) group_right () (0 * {held} + 1))"


def _busy_per_gpu(sel: str) -> str:
    """Each GPU's busy peak in the bucket, one series per (node, uuid): SM activity where
    the GPU reports it, else utilization (the idle detector's own choice of signal)."""
    return (
        f"(max by (node, uuid) (max_over_time(gpuscope_gpu_sm_active_ratio{{{sel}}}{W}))"
        f" or max by (node, uuid) (max_over_time(gpuscope_gpu_utilization_ratio{{{sel}}}{W})))"
    )


def _held(sel: str, off: str = "") -> str:
    """1 per (GPU, workload) held at the bucket's end (``off``: a bucket earlier): the
    join's right side."""
    return (
        f"max by (node, uuid, namespace, pod, container) (gpuscope_gpu_workload_info{{{sel}}}{off})"
    )


def _hot(sel: str, floor: float) -> str:
    """Ports over ``floor`` of their line rate in the bucket, either direction (labels
    node, device, port). One selector a direction: Prometheus refuses ``increase()`` over
    both at once (the name dropped, two series of one label set), VictoriaMetrics does not.
    The line rate is one series a port (``min by``: a port with two rate series, relabelled
    or renamed within the look-back, made Prometheus refuse the one-to-one comparison and
    the shard's question fail; the lower rate keeps a port rather than leaving it out)."""
    line = (
        f"{floor * 300:g} * min by (node, device, port) "
        f"(gpuscope_ib_port_rate_bytes_per_second{{{sel}}})"
    )

    def over(metric: str) -> str:
        return (
            f"(max by (node, device, port) (increase({metric}{{{sel}}}{W})) > {PORT_ON} ({line}))"
        )

    return (
        f"({over('gpuscope_ib_transmit_bytes_total')} or {over('gpuscope_ib_receive_bytes_total')})"
    )


def gpu_link_floors(analytics: AnalyticsSettings) -> dict[str, float]:
    """Per GPU link counter, the floor in bytes/s over which a link is kept in a bucket:
    :data:`HOT_LINK_FLOOR` of the smallest capacity configured for it (a metric with none
    configured gets no ratio from the detector and is not asked). Refuses a detector hot
    line under the floor share, for links and for ports (:data:`HOT_PORT_FLOOR`): what it
    would call hot would then be left out, silently. Called where summaries are on."""
    if analytics.ib_hot_ratio < HOT_PORT_FLOOR:
        raise ConfigError(
            f"analytics.ib_hot_ratio {analytics.ib_hot_ratio:g} is under fleet summaries' "
            f"port floor {HOT_PORT_FLOOR:g}: hot ports would not be stored"
        )
    if analytics.gpu_link_hot_ratio < HOT_LINK_FLOOR:
        raise ConfigError(
            f"analytics.gpu_link_hot_ratio {analytics.gpu_link_hot_ratio:g} is under fleet "
            f"summaries' GPU-link floor {HOT_LINK_FLOOR:g}: hot links would not be stored"
        )
    floors: dict[str, float] = {}
    for metric, field in GPU_LINK_CAPACITIES.items():
        capacities: Mapping[str, float] = getattr(analytics, field)
        if capacities:
            floors[metric] = HOT_LINK_FLOOR * min(capacities.values())
    return floors


def _hot_links(sel: str, metric: str, floor: float) -> str:
    """GPUs whose ``metric`` link carried more than ``floor`` bytes/s in the bucket in
    either direction (one series a direction; ``on (node, uuid)`` joins them)."""
    return f"(increase({metric}{{{sel}}}{W}) > {floor * 300:.17g})"


def _link_questions(sel: str, floors: Mapping[str, float]) -> list[SummaryQuestion]:
    """The hot GPU links' increases, both directions, each with its GPU's ``model`` label
    (joined on the hot ones only, after ``and``). The right side is one series a GPU even
    where a GPU has several ``gpuscope_gpu_info`` series, with one model or two (relabelled,
    or a driver that renamed the model within the look-back): ``group by`` alone left one a
    model, and then Prometheus refused the join (many-to-many) and VictoriaMetrics answered
    each link twice, which the detector would add up. A GPU with no info series has no
    model, so no capacity and no finding directly either: its links are not stored."""
    model = (
        f"topk by (node, uuid) (1, group by (node, uuid, model) "
        f'(gpuscope_gpu_info{{{sel},mig_instance=""}}))'
    )
    return [
        SummaryQuestion(
            f"(increase({m}{{{sel}}}{W}) and on (node, uuid) {_hot_links(sel, m, f)})"
            f" * on (node, uuid) group_left (model) {model}",
            m,
        )
        for m, f in floors.items()
    ]


def _changed(question: str, before: str, on: str) -> str:
    """``question``'s series whose value differs from ``before`` (the same question a bucket
    earlier) or that ``before`` lacks, and all of them in each hour's last bucket (evaluated
    at its last second, ``time() % 3600`` is 3599): a reader finds every series' value
    within the hour before, whenever the collector started."""
    same = f"({question}) == on ({on}) ({before})"
    keyframe = f"vector(time() % {HOUR_S}) >= {KEYFRAME_AT}"
    return f"({question}) unless on ({on}) (({same}) unless on () ({keyframe}))"


def _node_questions(sel: str, changes_only: bool) -> list[SummaryQuestion]:
    """Per node: GPUs present, healthy, held, and utilization mean and peak. The mean is
    the mean over the node's GPUs of each GPU's mean over the bucket (what direct
    scraping's utilization view gives a node at a 5-minute step, every GPU scraped alike);
    the peak the highest GPU's peak. With ``changes_only`` each is asked only where it
    differs from the bucket before, and in each hour's last bucket. The API's utilization
    view by cluster and by node reads the GPUs present and the mean (as each series' last
    value at or before a bucket, within the hour, where the node's agent is present:
    :mod:`gpuscope.collector.http_api.api_node_summaries`); no detector or alert rule
    reads them."""

    def node(off: str) -> list[tuple[str, str]]:
        util = f"gpuscope_gpu_utilization_ratio{{{sel}}}{W}{off}"
        return [
            (f"count by (node) (gpuscope_gpu_info{{{sel}}}{off})", "gpus"),
            (f"sum by (node) (gpuscope_gpu_up{{{sel}}}{off})", "gpus_up"),
            # 0 where a node's GPUs are all free (a count of nothing is no series)
            (
                f"(count by (node) ({_held(sel, off)}) or on (node) "
                f"(0 * count by (node) (gpuscope_gpu_info{{{sel}}}{off})))",
                "gpus_held",
            ),
            (f"avg by (node) (avg_over_time({util}))", "utilization_mean"),
            (f"max by (node) (max_over_time({util}))", "utilization_max"),
        ]

    now, before = node(""), node(OFFSET)
    return [
        SummaryQuestion(_changed(q, b, "node") if changes_only else q, f"gpuscope:node_{name}")
        for (q, name), (b, _) in zip(now, before, strict=True)
    ]


def summary_questions(
    sel: str,
    floor: float = HOT_PORT_FLOOR,
    *,
    changes_only: bool = False,
    link_floors: Mapping[str, float] | None = None,
) -> list[SummaryQuestion]:
    """Every question of one shard (``sel``: its node matcher, e.g. ``node=~"a|b"``).
    ``changes_only``: node summaries only where they change (docs/scale.md, "What is
    stored only where it changes"); ``link_floors``: the GPU-link floors in bytes/s
    (:func:`gpu_link_floors`, from the settings the collector runs with; ``None``: the
    default settings')."""
    if link_floors is None:
        link_floors = gpu_link_floors(AnalyticsSettings())
    held = _held(sel)
    hot = _hot(sel, floor)
    busy = _per_workload(_busy_per_gpu(sel), held)
    # each GPU's mean over the bucket, then the mean over the workload's GPUs: times the
    # GPUs it holds, the sum of its GPUs' means (every GPU scraped alike in the bucket)
    util_mean = _per_workload(
        f"avg by (node, uuid) (avg_over_time(gpuscope_gpu_utilization_ratio{{{sel}}}{W}))",
        held,
        "avg",
    )
    info_by = f"{WORKLOAD_BY}, project, interactive, workload_kind"
    return [
        # per node: liveness (the fleet-aware alert rules) and the agents' sources
        SummaryQuestion(
            f'{{__name__=~"gpuscope_agent_info|gpuscope_agent_source_up",{sel}}}', None
        ),
        # per workload
        SummaryQuestion(busy, "gpuscope_gpu_utilization_ratio", workload_key=True),
        SummaryQuestion(util_mean, UTILIZATION_MEAN, workload_key=True),
        SummaryQuestion(
            f"count by ({info_by}) (gpuscope_gpu_workload_info{{{sel}}})",
            "gpuscope_gpu_workload_info",
            workload_key=True,
            count_in_gpu=True,
        ),
        SummaryQuestion(
            f"max by ({WORKLOAD_BY}) "
            f"(max_over_time(gpuscope_gpu_workload_utilization_ratio{{{sel}}}{W}))",
            "gpuscope_gpu_workload_utilization_ratio",
            workload_key=True,
        ),
        SummaryQuestion(
            f"sum by ({WORKLOAD_BY}) "
            f"(avg_over_time(gpuscope_gpu_workload_memory_used_bytes{{{sel}}}{W}))",
            "gpuscope_gpu_workload_memory_used_bytes",
            workload_key=True,
        ),
        # which GPU a workload holds, for shared GPUs only: packing fractions needs it
        SummaryQuestion(
            f"gpuscope_gpu_workload_info{{{sel}}} and on (node, uuid) "
            f"(count by (node, uuid) (gpuscope_gpu_workload_info{{{sel}}}) > 1)",
            "gpuscope:shared_gpu_workload_info",
        ),
        # per node: the fragmentation inputs and the node's utilization
        *_node_questions(sel, changes_only),
        # per port, the hot ones only: both directions, waits, line rate
        *(
            SummaryQuestion(f"increase({m}{{{sel}}}{W}) and {PORT_ON} {hot}", m)
            for m in (
                "gpuscope_ib_transmit_bytes_total",
                "gpuscope_ib_receive_bytes_total",
                "gpuscope_ib_transmit_wait_total",
            )
        ),
        SummaryQuestion(
            f"gpuscope_ib_port_rate_bytes_per_second{{{sel}}} and {PORT_ON} {hot}",
            "gpuscope_ib_port_rate_bytes_per_second",
        ),
        # problems only: ports with errors, GPUs down, GPUs whose ECC errors grew
        SummaryQuestion(
            f"increase(gpuscope_ib_errors_total{{{sel}}}{W}) > 0", "gpuscope_ib_errors_total"
        ),
        SummaryQuestion(f"gpuscope_gpu_up{{{sel}}} == 0", "gpuscope_gpu_up"),
        SummaryQuestion(
            f"increase(gpuscope_gpu_ecc_errors_total{{{sel}}}{W}) > 0",
            "gpuscope_gpu_ecc_errors_total",
        ),
        # per GPU link, the hot ones only: both directions, each with its GPU's model
        *_link_questions(sel, link_floors),
    ]


def reshape(
    question: SummaryQuestion, result: Iterable[dict[str, object]]
) -> list[dict[str, object]]:
    """An answer's series as they are stored: named, workload-keyed, a GPU count moved
    into ``gpu`` (one series per distinct count: a count is a label, the value 1)."""
    out: list[dict[str, object]] = []
    for item in result:
        metric, values = item.get("metric"), item.get("values")
        if not isinstance(metric, dict) or not isinstance(values, list):
            continue
        labels = dict(metric)
        if question.name is not None:
            labels["__name__"] = question.name
        if question.workload_key:
            labels["uuid"] = workload_key(
                str(labels.get("namespace", "")),
                str(labels.get("pod", "")),
                str(labels.get("container", "")),
            )
        if not question.count_in_gpu:
            out.append({"metric": labels, "values": values})
            continue
        by_count: dict[str, list[object]] = {}
        for point in values:
            count = f"{float(point[1]):g}"
            by_count.setdefault(count, []).append([point[0], "1"])
        for count, points in by_count.items():
            out.append({"metric": {**labels, "gpu": count}, "values": points})
    return out
