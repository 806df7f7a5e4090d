"""Settings: one model, filled from defaults < config file < environment < flags.

Every component reads its part of :class:`Settings`. The precedence is the same
everywhere: a flag beats an environment variable (``GPUSCOPE_<SECTION>__<KEY>``), which beats
the YAML config file, which beats the default. A value that does not validate raises
:class:`~gpuscope.core.errors.ConfigError` with one line naming the key and where it came from.

The sections' base and bounds are in gpuscope/core/settings_section.py; the collector's
sections in gpuscope/core/collector_settings.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from gpuscope.core.agent_settings import AgentSettings
from gpuscope.core.collector_settings import CollectorSettings, WorkloadSettings
from gpuscope.core.errors import ConfigError

# The layers and the checks the agent's light loader shares (gpuscope.agent.config), named
# here too for the modules that have always imported them from this one.
from gpuscope.core.settings_layers import CONFIG_ENV as CONFIG_ENV  # noqa: PLC0414
from gpuscope.core.settings_layers import ENV_PREFIX as ENV_PREFIX  # noqa: PLC0414
from gpuscope.core.settings_layers import check_http_url as check_http_url  # noqa: PLC0414
from gpuscope.core.settings_layers import layered, origin_of
from gpuscope.core.settings_layers import parse_listen as parse_listen  # noqa: PLC0414
from gpuscope.core.settings_layers import read_yaml_file as read_yaml_file  # noqa: PLC0414
from gpuscope.core.settings_section import MAX_DAYS, WEEK_MINUTES, Section

FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
#: Kueue's default ``fairSharing.preemptionStrategies``.
FAIR_SHARING_STRATEGIES: tuple[FairSharingStrategy, ...] = (
    "LessThanOrEqualToFinalShare",
    "LessThanInitialShare",
)


class AnalyticsSettings(Section):
    """Thresholds of the detectors; the defaults follow common practice."""

    #: A workload is idle when each of its GPUs stays under this for the whole window.
    idle_utilization_below: float = Field(default=0.05, ge=0, le=1)
    idle_window_minutes: float = Field(default=30, gt=0, le=WEEK_MINUTES)
    #: Also require GPU memory traffic under the threshold (catches data-loading loops).
    idle_include_memory_activity: bool = False
    #: No workload is called idle in its first minutes.
    startup_grace_minutes: float = Field(default=10, ge=0, le=WEEK_MINUTES)
    #: Interactive sessions older than this get a session_time_limit finding (0: off).
    max_session_age_hours: float = Field(default=72, ge=0, le=MAX_DAYS * 24)
    #: ``gpuscope whatif idle`` recommends the idle threshold that frees the most
    #: GPU-hours while at most this share of the sessions it stops come back.
    idle_policy_max_comeback_share: float = Field(default=0.05, ge=0, le=1)
    #: The placement policy the cluster's scheduler runs, by the what-if's names: the
    #: what-if replays it against what happened (``summary.calibration``) and the capacity
    #: what-if replays under it. kube-scheduler's default profile is ``leastallocated``
    #: (also where Kueue admits: Kueue gates pods, kube-scheduler places them);
    #: KAI-Scheduler's default binpack, or a MostAllocated profile, ``mostallocated``.
    whatif_policy: Literal[
        "leastallocated", "mostallocated", "bestfit", "dotprod", "random", "fgd"
    ] = "leastallocated"
    #: A port is hot when its throughput stays over this share of link rate for the window.
    ib_hot_ratio: float = Field(default=0.8, gt=0, le=1)
    ib_hot_window_minutes: float = Field(default=5, gt=0, le=WEEK_MINUTES)
    #: An NVLink/PCIe link is hot when a GPU's throughput stays over this share of the
    #: link's capacity for ``ib_hot_window_minutes`` (the same rule as an IB port).
    gpu_link_hot_ratio: float = Field(default=0.8, gt=0, le=1)
    #: NVLink capacity per GPU and direction in bytes/s, by a substring of the
    #: ``gpuscope_gpu_info`` ``model`` label (the longest matching key wins; a model no key
    #: matches gets no NVLink ratio). H100/H200: 18 NVLink 4 links x 25 GB/s; A100: 12 x 25.
    nvlink_bytes_per_second: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: {"H100": 450e9, "H200": 450e9, "A100": 300e9}
    )
    #: PCIe capacity per GPU and direction in bytes/s, by model substring as above: the
    #: usable rate of the GPU's x16 slot, Gen5 (~64 GB/s) for H100/H200, Gen4 (~32 GB/s)
    #: for A100. A model no key matches gets no PCIe ratio.
    pcie_bytes_per_second: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: {"H100": 64e9, "H200": 64e9, "A100": 32e9}
    )
    #: Job sizes (GPUs on one node) that node fragmentation checks, besides pending ones.
    job_sizes: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default_factory=lambda: [1, 2, 4, 8]
    )
    #: Share of tasks the FGD task mix keeps (most frequent groups first).
    fgd_task_coverage: float = Field(default=0.95, gt=0, le=1)
    #: Kueue's ``fairSharing.enable`` (its Configuration, which gpuscope cannot read from
    #: the cluster): the queue model then preempts by fair sharing's strategies, not
    #: classic preemption (docs/analytics.md, Queues, "Kueue fair sharing").
    kueue_fair_sharing: bool = False
    #: Kueue's ``fairSharing.preemptionStrategies``, in order (its default: both).
    kueue_fair_sharing_strategies: list[FairSharingStrategy] = Field(
        default_factory=lambda: list(FAIR_SHARING_STRATEGIES), min_length=1, max_length=2
    )
    #: Node labels that name topology domains (racks, leaf switches, NVLink domains) when
    #: no Kueue/KAI Topology or Volcano HyperNode is given; unset: the defaults in
    #: gpuscope.analytics.domains.topology_levels (GKE, AWS, topograph, nvidia.com/gpu.clique).
    topology_labels: list[str] | None = None
    #: Minutes between scheduled runs of the detectors in the collector.
    interval_minutes: float = Field(default=5, gt=0, le=WEEK_MINUTES)


class ActionsSettings(Section):
    """The actions executor's safety switches (policies themselves are in a policy file)."""

    #: Global kill switch: when true every new action is a dry run, whatever flags and
    #: policies say (an executing run still lifts the reservations gpuscope made).
    kill_switch: bool = False
    #: Allowlist mode: when not empty, act only on pods in these namespaces.
    allowlist_namespaces: list[str] = Field(default_factory=list)
    #: At most this many acts on workloads (delete, evict, stop, annotate) per rolling hour;
    #: dry runs are counted apart from real ones.
    max_actions_per_hour: int = Field(default=10, ge=0)
    #: The policy file the collector's schedule runs; none: no scheduled actions.
    policy_file: Path | None = None
    #: Whether the collector's schedule executes policies that say ``dry_run: false``
    #: (``gpuscope act`` needs ``--execute`` instead).
    execute: bool = False
    #: Minutes between scheduled runs of the policies.
    interval_minutes: float = Field(default=5, gt=0, le=WEEK_MINUTES)


class AlertsSettings(Section):
    """The alerts job (docs/alerts.md): rules, receivers and routes live in their own file."""

    enabled: bool = True
    #: The alerts config (YAML); without one, the shipped rules are evaluated and kept
    #: (API) but nothing is sent.
    config_file: Path | None = None


class ReportSettings(Section):
    """The weekly utilization report (gpuscope/analytics/report/) and its place on the schedule."""

    #: Write the report on the collector's schedule (the previous ISO week, UTC).
    schedule_enabled: bool = True
    schedule_day: Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"] = "mon"
    #: Hour of ``schedule_day`` (UTC) the report is written.
    schedule_hour: int = Field(default=7, ge=0, le=23)
    #: Each week's report goes in ``<out_dir>/<YYYY-Www>/``.
    out_dir: Path = Path("reports")
    #: Cost per GPU-hour. Unset: an estimate from the cluster's GPU models
    #: (gpuscope/core/gpu_prices.py, overridden per model by ``gpu_hour_prices``), which
    #: the report labels as one; no money at all with ``estimate_cost: false``.
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    #: Price per GPU-hour by model name fragment (``H100: 3.2``), over the defaults.
    gpu_hour_prices: dict[str, float] = Field(default_factory=dict)
    estimate_cost: bool = True
    currency: str = "USD"
    #: A link (Grafana) the chat summary points to, besides the report file.
    dashboard_url: str = ""
    #: Rows in the top-N sections (idle sessions, IB hot spots, actions).
    top_n: int = Field(default=10, ge=1, le=1000)
    #: No longer used: the week's fragmentation is evaluated at every inventory change
    #: (gpuscope/analytics/report/fragmentation.py). Kept so existing settings files still load.
    fragmentation_step_hours: float = Field(default=6, gt=0, le=168)


class LoggingSettings(Section):
    """How every command logs (``--log-format`` overrides it)."""

    #: ``text`` lines for people, or ``json``: one object per record for log collectors.
    format: Literal["text", "json"] = "text"


class Settings(Section):
    agent: AgentSettings = Field(default_factory=AgentSettings)
    collector: CollectorSettings = Field(default_factory=CollectorSettings)
    analytics: AnalyticsSettings = Field(default_factory=AnalyticsSettings)
    workloads: WorkloadSettings = Field(default_factory=WorkloadSettings)
    actions: ActionsSettings = Field(default_factory=ActionsSettings)
    alerts: AlertsSettings = Field(default_factory=AlertsSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)


def load_settings(
    config_file: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Build settings from the file, the environment and flag overrides, in that order.

    ``overrides`` holds flag values as ``{"agent": {"listen": ...}}``; a ``None`` value
    means the flag was not given and is skipped.
    """
    merged, origin = layered(config_file, env, overrides)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        where = origin_of(origin, loc[0], loc[1] if len(loc) > 1 else "")
        dotted = ".".join(loc)
        # a BaseModel section says extra_forbidden; the agent's dataclass section (declared
        # once in gpuscope/core/agent_settings.py) says unexpected_keyword_argument
        if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            raise ConfigError(f"unknown setting {dotted} (from {where})") from None
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"invalid setting {dotted} (from {where}): {message}") from None
