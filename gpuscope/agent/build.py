"""Assemble an agent from settings: choose the sources, check the roots, build the collector.

``auto`` picks DCGM, then NVML, and fails with a clear message if neither is present; the
simulated source is used only when asked for (docs/design.md, CLI).
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

from gpuscope.agent.config import AgentConfig
from gpuscope.agent.devices.sources import GpuSource, IbSource, WorkloadAttributor
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.core.agent_settings import AgentSettings
from gpuscope.core.errors import SourceError, UserError

log = logging.getLogger(__name__)


def _check_root(flag: str, path: Path | None) -> None:
    if path is not None and not path.is_dir():
        raise UserError(f"{flag} {path} does not exist or is not a directory")


def _sim_parts(
    settings: AgentSettings,
) -> tuple[str, GpuSource, IbSource | None, WorkloadAttributor]:
    from gpuscope.agent.devices.infiniband import SysfsIbSource
    from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource, scenario_clock
    from gpuscope.sim import SimulatedCluster, load_scenario
    from gpuscope.sim.one_node import default_node_scenario, one_node

    # the scenario cut down to this node's workloads: a node agent carries its own pods,
    # not the cluster's (the same readings, gpuscope/sim/one_node.py)
    if settings.sim_scenario is not None:
        scenario = load_scenario(settings.sim_scenario)
        node = settings.node or scenario.nodes[0].name
        mine = one_node(scenario, node)
    else:
        node, mine = default_node_scenario(settings.node or None, settings.sim_seed)
    names = [n.name for n in mine.nodes]
    if node not in names:
        raise UserError(
            f"--node {node} is not a node of scenario {mine.name!r} "
            f"(it has {', '.join(names[:3])}, ...)"
        )
    cluster = SimulatedCluster(mine)
    clock = scenario_clock(mine)
    ib: IbSource | None = (
        SysfsIbSource(settings.sysfs_root)
        if settings.sysfs_root is not None
        else SimIbSource(cluster, node, clock)
    )
    return node, SimGpuSource(cluster, node, clock), ib, SimAttributor(cluster, node, clock)


def _dcgm_source(settings: AgentSettings) -> GpuSource:
    if settings.dcgm_exporter_url:
        from gpuscope.agent.devices.dcgm_exporter import DcgmExporterSource

        return DcgmExporterSource(
            settings.dcgm_exporter_url, timeout=settings.source_timeout_seconds
        )
    from gpuscope.agent.devices.dcgm import DcgmSource, load_dcgm_bindings
    from gpuscope.agent.devices.nvml import NvmlSource

    load_dcgm_bindings(settings.dcgm_bindings_path)  # fail fast, before touching NVML
    try:
        base: GpuSource | None = NvmlSource()
    except SourceError as exc:
        log.warning("NVML unavailable beside DCGM; no process list error=%s", exc)
        base = None
    hostengine = None if settings.dcgm_hostengine == "embedded" else settings.dcgm_hostengine
    return DcgmSource.from_bindings(settings.dcgm_bindings_path, base=base, hostname=hostengine)


def _gpu_source(settings: AgentSettings) -> GpuSource:
    from gpuscope.agent.devices.nvml import NvmlSource

    choice = settings.gpu_source
    if choice == "nvml":
        try:
            return NvmlSource()
        except SourceError as exc:
            raise UserError(f"--gpu-source nvml: {exc}", exit_code=1) from None
    if choice == "dcgm":
        try:
            return _dcgm_source(settings)
        except SourceError as exc:
            raise UserError(f"--gpu-source dcgm: {exc}", exit_code=1) from None
    reasons = []
    for name, make in (("DCGM", _dcgm_source), ("NVML", lambda _s: NvmlSource())):
        try:
            return make(settings)
        except SourceError as exc:
            reasons.append(f"{name}: {exc}")
    raise UserError(
        "no GPU source found (" + "; ".join(reasons) + "); "
        "use --gpu-source sim to run on a simulated node",
        exit_code=1,
    )


def _real_attributor(settings: AgentConfig, node: str) -> WorkloadAttributor:
    from gpuscope.agent.workloads.attribution import KubeletAttributor
    from gpuscope.agent.workloads.dra import SliceSource
    from gpuscope.agent.workloads.podmeta import (
        ApiServerPodMetadata,
        NoPodMetadata,
        PodMetadataSource,
    )
    from gpuscope.agent.workloads.podresources import PodResourcesClient

    agent = settings.agent
    # DRA devices are named by driver/pool/device in pod-resources; the node's
    # ResourceSlices say which GPU each is (read with the pod metadata's API access)
    slices = (
        SliceSource(node, agent.pod_metadata_ttl_seconds, time.monotonic)
        if agent.pod_metadata == "apiserver"
        else None
    )
    # Built even when the socket is missing now: the kubelet may create it later, and each
    # failed call only degrades attribution to the process list.
    pod_resources = PodResourcesClient(
        agent.pod_resources_socket,
        timeout=agent.source_timeout_seconds,
        dra_devices=slices.identities if slices is not None else None,
    )
    if not agent.pod_resources_socket.exists():
        log.warning("no kubelet pod-resources socket yet path=%s", agent.pod_resources_socket)
    metadata: PodMetadataSource = (
        ApiServerPodMetadata(node, agent.pod_metadata_ttl_seconds, time.monotonic)
        if agent.pod_metadata == "apiserver"
        else NoPodMetadata()
    )
    return KubeletAttributor(
        agent.procfs_root or Path("/proc"), pod_resources, metadata, settings.workloads
    )


def build_agent(settings: AgentConfig) -> AgentCollector:
    """Build the collector; raises UserError on bad settings."""
    agent = settings.agent
    _check_root("--sysfs-root", agent.sysfs_root)
    _check_root("--procfs-root", agent.procfs_root)
    if agent.gpu_source == "sim":
        node, gpu, ib, attributor = _sim_parts(agent)
    else:
        from gpuscope.agent.devices.infiniband import SysfsIbSource

        node = agent.node or socket.gethostname()
        gpu = _gpu_source(agent)
        from gpuscope.agent.devices.infiniband import STALL_SECONDS

        # a stuck port gives up a quarter of the source's deadline at most
        stall = max(0.05, min(STALL_SECONDS, agent.source_timeout_seconds / 4))
        ib = SysfsIbSource(agent.sysfs_root or Path("/sys"), stall_seconds=stall)
        attributor = _real_attributor(settings, node)
    return AgentCollector(node, gpu, ib, attributor, timeout_seconds=agent.source_timeout_seconds)
