"""A simulated cluster: pods placed on GPUs, and what NVML, DCGM and sysfs would read.

The placement is fixed when the cluster is built (planted by the scenario, or first fit),
and can change later through :meth:`SimulatedCluster.remove_pod` (what an actuator's
simulated backend calls). Readings are pure functions of the placement and the time.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuscope.core.records import (
    GpuProcess,
    GpuReading,
    GpuWorkload,
    IbPortReading,
    WorkloadKind,
)
from gpuscope.sim.behaviour import level, mean_level_integral, noise, stable_id
from gpuscope.sim.scenario import GPU_MODELS, GpuModel, NodeSpec, Scenario, WorkloadSpec

#: Counters start as if the node had booted this long before the scenario's origin.
BOOT_BEFORE_ORIGIN = 30 * 86400.0
_OWNER_KINDS = {
    "interactive": "Notebook",
    "training": "PyTorchJob",
    "batch": "Job",
    "inference": "ReplicaSet",
}
_IB_MTU = 4096


@dataclass(frozen=True, slots=True)
class Assignment:
    """One GPU (or MIG instance, or share of a GPU) a pod holds."""

    gpu_index: int
    share: float = 1.0
    mig_instance: str = ""


@dataclass(frozen=True, slots=True)
class SimPod:
    workload: WorkloadSpec
    replica: int
    name: str
    uid: str
    node: str | None
    assignments: tuple[Assignment, ...]
    key: int

    @property
    def namespace(self) -> str:
        return self.workload.namespace

    @property
    def container(self) -> str:
        return "notebook" if self.workload.kind == "interactive" else "main"

    @property
    def owner_kind(self) -> str:
        return _OWNER_KINDS[self.workload.kind]

    @property
    def start(self) -> float:
        return self.workload.start

    @property
    def end(self) -> float | None:
        return self.workload.end

    def alive(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass
class _GpuSlot:
    """One GPU's holders over time: (start, end, share) of each, so pods that run one
    after another can take the same GPU (a steady-state scenario's jobs come and go)."""

    uses: list[tuple[float, float, float]] = field(default_factory=list)
    free_instances: list[str] = field(default_factory=list)

    def used(self, start: float, end: float) -> float:
        """The most of the GPU taken at any instant of [start, end) (holders that follow
        one another on a shared GPU do not add up)."""
        overlapping = [(s, e, share) for s, e, share in self.uses if s < end and start < e]
        if len(overlapping) < 2:
            return sum(share for *_, share in overlapping)
        instants = {max(start, s) for s, _, _ in overlapping}
        return max(sum(share for s, e, share in overlapping if s <= t < e) for t in instants)


class SimulatedCluster:
    """The state of a simulated cluster and the readings it produces at any time."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self._nodes = {n.name: n for n in scenario.nodes}
        self._removed: dict[str, float] = {}
        self._uuids: dict[tuple[str, int, str], str] = {}
        self.pods: list[SimPod] = self._place(scenario)
        self._by_node: dict[str, list[SimPod]] = {}
        # (start, end, pod) per node, for the readings' "who runs here now" (a steady-state
        # week has a hundred pods a node over time, a handful at once)
        self._spans: dict[str, list[tuple[float, float, SimPod]]] = {}
        self._ib_cache: dict[tuple[str, int], list[tuple[float, SimPod]]] = {}
        # per GPU (node, index, MIG instance): the work of the pods that held it and ended,
        # by end time, so energy and traffic counters keep it after they leave
        done: dict[tuple[str, int, str], list[tuple[float, float, float]]] = {}
        for pod in self.pods:
            if pod.node is not None:
                self._by_node.setdefault(pod.node, []).append(pod)
                end = float("inf") if pod.end is None else pod.end
                self._spans.setdefault(pod.node, []).append((pod.start, end, pod))
                if pod.end is not None:
                    work = mean_level_integral(pod.workload, pod.start, pod.start, pod.end)
                    multi = pod.workload.kind == "training" and pod.workload.gpus > 1
                    for a in pod.assignments:
                        key = (pod.node, a.gpu_index, a.mig_instance)
                        done.setdefault(key, []).append(
                            (pod.end, work * a.share, work if multi else 0.0)
                        )
        self._done: dict[tuple[str, int, str], tuple[list[float], list[float], list[float]]]
        self._done = {}
        for key, rows in done.items():
            rows.sort()
            ends, work_sum, link_sum = [], [0.0], [0.0]
            for end, w, link in rows:
                ends.append(end)
                work_sum.append(work_sum[-1] + w)
                link_sum.append(link_sum[-1] + link)
            self._done[key] = (ends, work_sum, link_sum)

    # -- identity -------------------------------------------------------------------------
    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.scenario.nodes]

    def node(self, name: str) -> NodeSpec:
        return self._nodes[name]

    def gpu_uuid(self, node: str, index: int, instance: str = "") -> str:
        key = (node, index, instance)
        got = self._uuids.get(key)
        if got is None:  # built once: every reading of every GPU asks again
            h = stable_id(f"{self.seed}/{node}/{index}/{instance}")
            prefix = "MIG" if instance else "GPU"
            got = self._uuids[key] = f"{prefix}-{uuid.UUID(int=h << 64 | h >> 1 & ((1 << 64) - 1))}"
        return got

    def mig_instances(self, node: NodeSpec) -> list[str]:
        if not node.mig_profile:
            return []
        slices = int(node.mig_profile.split("g", 1)[0])
        return [str(i + 1) for i in range(7 // slices)]

    # -- placement ------------------------------------------------------------------------
    def _place(self, scenario: Scenario) -> list[SimPod]:
        slots = {
            n.name: [_GpuSlot(free_instances=self.mig_instances(n)) for _ in range(n.gpus)]
            for n in scenario.nodes
        }
        pods: list[SimPod] = []
        for w in scenario.workloads:
            for r in range(w.replicas):
                name = self._pod_name(w, r)
                key = stable_id(f"{scenario.seed}/{w.namespace}/{name}")
                uid = str(uuid.UUID(int=key << 64 | key))
                node: str | None = None
                assigned: tuple[Assignment, ...] = ()
                if not w.pending:
                    node, assigned = self._assign(w, r, slots)
                pods.append(SimPod(w, r, name, uid, node, assigned, key))
        return pods

    @staticmethod
    def _pod_name(w: WorkloadSpec, replica: int) -> str:
        if w.kind == "interactive":
            return f"{w.name}-0"
        if w.kind in ("training", "batch"):
            return f"{w.name}-worker-{replica}"
        return f"{w.name}-{stable_id(w.name) % 0xFFFFF:05x}-{replica}"

    def _assign(
        self, w: WorkloadSpec, replica: int, slots: dict[str, list[_GpuSlot]]
    ) -> tuple[str | None, tuple[Assignment, ...]]:
        candidates = [w.nodes[replica]] if w.nodes else list(slots)
        for name in candidates:
            got = self._fit(w, slots[name])
            if got is not None:
                return name, got
        return None, ()

    @staticmethod
    def _fit(w: WorkloadSpec, gpus: list[_GpuSlot]) -> tuple[Assignment, ...] | None:
        order = list(w.gpu_indices) or list(range(len(gpus)))
        span = (w.start, float("inf") if w.end is None else w.end)
        if w.mig:
            for i in order:
                if i < len(gpus) and gpus[i].free_instances:
                    return (Assignment(i, 1.0, gpus[i].free_instances.pop(0)),)
            return None
        if w.gpu_fraction < 1:
            for i in order:
                if (
                    i < len(gpus)
                    and not gpus[i].free_instances
                    and (1 - gpus[i].used(*span) >= w.gpu_fraction - 1e-9)
                ):
                    gpus[i].uses.append((*span, w.gpu_fraction))
                    return (Assignment(i, w.gpu_fraction),)
            return None
        free = [i for i in order if i < len(gpus) and gpus[i].used(*span) <= 1e-9]
        free = [i for i in free if not gpus[i].free_instances]
        if len(free) < w.gpus:
            return None
        chosen = free[: w.gpus]
        for i in chosen:
            gpus[i].uses.append((*span, 1.0))
        return tuple(Assignment(i) for i in chosen)

    def remove_pod(self, namespace: str, name: str, t: float) -> bool:
        """End a pod at time t (deleted, evicted or stopped); False if there is none."""
        for pod in self.pods:
            if pod.namespace == namespace and pod.name == name and self.is_alive(pod, t):
                self._removed[pod.uid] = t
                return True
        return False

    def pods_on(self, node: str, t: float) -> list[SimPod]:
        running = [p for s, e, p in self._spans.get(node, ()) if s <= t < e]
        if not self._removed:
            return running
        return [p for p in running if self.is_alive(p, t)]

    def is_listed(self, pod: SimPod, t: float) -> bool:
        """Whether the API server lists the pod at t: submitted (its ``arrival``, Pending
        until it starts), not ended, not removed by an action."""
        w = pod.workload
        arrived = (w.start if w.arrival is None else w.arrival) <= t
        removed = self._removed.get(pod.uid)
        return arrived and (pod.end is None or t < pod.end) and (removed is None or t < removed)

    def is_alive(self, pod: SimPod, t: float) -> bool:
        """Whether the pod runs at t: started, not ended, not removed by an action."""
        removed = self._removed.get(pod.uid)
        return pod.alive(t) and (removed is None or t < removed)

    def _end(self, pod: SimPod) -> float | None:
        ends = [e for e in (pod.end, self._removed.get(pod.uid)) if e is not None]
        return min(ends) if ends else None

    # -- readings -------------------------------------------------------------------------
    def gpu_readings(self, node_name: str, t: float) -> list[GpuReading]:
        """What NVML (with DCGM's profiling fields) would report on a node at time t."""
        node = self._nodes[node_name]
        model = GPU_MODELS[node.gpu_model]
        pods = self.pods_on(node_name, t)
        out: list[GpuReading] = []
        for i in range(node.gpus):
            lost = any(
                f.kind == "gpu_lost" and f.node == node_name and f.device_index == i and t >= f.at
                for f in self.scenario.faults
            )
            uuid_ = self.gpu_uuid(node_name, i)
            ident = {
                "index": i,
                "model": model.name,
                "driver_version": "550.90.07",
                "pci_bus_id": f"00000000:{0x18 + i * 0x10:02X}:00.0",
            }
            if lost:
                out.append(GpuReading(uuid=uuid_, up=False, error="GPU is lost", **ident))  # type: ignore[arg-type]
                continue
            on_gpu = [(p, a) for p in pods for a in p.assignments if a.gpu_index == i]
            instances = self.mig_instances(node)
            out.append(
                self._reading(
                    node_name,
                    i,
                    uuid_=uuid_,
                    instance="",
                    ident=ident,
                    model=model,
                    on_gpu=on_gpu,
                    t=t,
                    instances=instances,
                )
            )
            for inst in instances:
                on_inst = [(p, a) for p, a in on_gpu if a.mig_instance == inst]
                out.append(
                    self._reading(
                        node_name,
                        i,
                        uuid_=self.gpu_uuid(node_name, i, inst),
                        instance=inst,
                        ident=ident,
                        model=model,
                        on_gpu=on_inst,
                        t=t,
                        instances=[],
                        parent_uuid=uuid_,
                        profile=node.mig_profile,
                    )
                )
        return out

    def _reading(
        self,
        node: str,
        index: int,
        *,
        uuid_: str,
        instance: str,
        ident: dict[str, object],
        model: GpuModel,
        on_gpu: list[tuple[SimPod, Assignment]],
        t: float,
        instances: list[str],
        parent_uuid: str = "",
        profile: str = "",
    ) -> GpuReading:
        n_slices = len(instances) or 1
        mem_total = model.memory_bytes
        if instance:
            mem_total = model.memory_bytes * int(profile.split("g", 1)[0]) // 8
        procs: list[GpuProcess] = []
        util = 0.0
        integral = 0.0
        mem_used = 4 * 2**20
        nvlink = 0.0
        for pod, a in on_gpu:
            lv = level(pod.workload, pod.key ^ index, pod.start, t) * a.share
            util += lv
            used = int(pod.workload.memory_fraction * a.share * mem_total)
            mem_used += used
            pid = 1000 + (pod.key ^ index) % 4_000_000
            procs.append(GpuProcess(pid, used, min(1.0, lv), min(1.0, lv * 0.5)))
            end = self._end(pod)
            stop = t if end is None else min(t, end)
            integral += mean_level_integral(pod.workload, pod.start, pod.start, stop) * a.share
            if pod.workload.kind == "training" and pod.workload.gpus > 1:
                nvlink += (
                    0.3
                    * model.nvlink_bytes_per_second
                    * mean_level_integral(pod.workload, pod.start, pod.start, stop)
                )
        finished = self._done.get((node, index, instance))
        if finished is not None:  # pods that held this GPU and have ended
            ends, work_sum, link_sum = finished
            k = bisect.bisect_right(ends, t)
            integral += work_sum[k]
            nvlink += 0.3 * model.nvlink_bytes_per_second * link_sum[k]
        util = min(1.0, util)
        mig_parent = bool(instances)
        since_boot = t + BOOT_BEFORE_ORIGIN
        idle_w = model.idle_watts / n_slices
        span_w = (model.max_watts - model.idle_watts) / n_slices
        key = stable_id(uuid_)
        g = noise(key, int(t // 15))
        return GpuReading(
            uuid=uuid_,
            mig_mode="enabled" if (mig_parent or instance) else "disabled",
            mig_instance=instance,
            mig_profile=profile if instance else "",
            parent_uuid=parent_uuid,
            utilization_ratio=None if mig_parent else round(util, 4),
            memory_utilization_ratio=None if mig_parent else round(util * 0.55, 4),
            memory_used_bytes=mem_used,
            memory_total_bytes=mem_total,
            power_watts=None if instance else round(idle_w + span_w * util + g * 3, 2),
            temperature_celsius=None if instance else round(31 + 44 * util + g, 1),
            energy_joules_total=None
            if instance
            else round(idle_w * since_boot + span_w * integral, 3),
            sm_clock_hz=model.sm_clock_mhz * 1e6,
            memory_clock_hz=model.memory_clock_mhz * 1e6,
            sm_active_ratio=None if mig_parent else round(util * 0.82, 4),
            tensor_active_ratio=None if mig_parent else round(util * 0.45, 4),
            dram_active_ratio=None if mig_parent else round(util * 0.38, 4),
            ecc_corrected_total=None if instance else 0,
            ecc_uncorrected_total=None if instance else 0,
            nvlink_tx_bytes_total=None if instance else round(nvlink + since_boot * 1e3),
            nvlink_rx_bytes_total=None if instance else round(nvlink + since_boot * 1e3),
            pcie_tx_bytes_total=None if instance else round(since_boot * 2e5 + integral * 2e9),
            pcie_rx_bytes_total=None if instance else round(since_boot * 3e5 + integral * 4e9),
            processes=tuple(procs),
            **ident,  # type: ignore[arg-type]
        )

    def gpu_workloads(
        self, node_name: str, t: float, readings_now: Sequence[GpuReading] | None = None
    ) -> list[GpuWorkload]:
        """Which pod uses which GPU on a node at time t, with what each really uses.

        ``readings_now`` are this node's readings at t if the caller has them already.
        """
        if readings_now is None:
            readings_now = self.gpu_readings(node_name, t)
        readings = {(r.index, r.mig_instance): r for r in readings_now}
        out: list[GpuWorkload] = []
        for pod in self.pods_on(node_name, t):
            for a in pod.assignments:
                reading = readings.get((a.gpu_index, a.mig_instance))
                if reading is None:
                    continue
                pid = 1000 + (pod.key ^ a.gpu_index) % 4_000_000
                proc = next((p for p in reading.processes if p.pid == pid), None)
                out.append(
                    GpuWorkload(
                        gpu_uuid=reading.uuid,
                        namespace=pod.namespace,
                        pod=pod.name,
                        container=pod.container,
                        workload_kind=WorkloadKind(pod.workload.kind),
                        project=pod.workload.project_name,
                        memory_used_bytes=proc.used_memory_bytes if proc else None,
                        utilization_ratio=proc.sm_utilization_ratio if proc else None,
                    )
                )
        return out

    def _ib_spans(self, node_name: str, port: int) -> list[tuple[float, SimPod]]:
        """(start, pod) of the pods on a node that load InfiniBand rail ``port``, in span
        order: the node's spans filtered once (a steady-state week has a hundred pods a
        node, every port of every reading walked them all), summed in the same order."""
        key = (node_name, port)
        found = self._ib_cache.get(key)
        if found is None:
            found = self._ib_cache[key] = [
                (start, pod)
                for start, _, pod in self._spans.get(node_name, ())
                if pod.workload.ib_load > 0 and any(a.gpu_index == port for a in pod.assignments)
            ]
        return found

    def ib_readings(self, node_name: str, t: float) -> list[IbPortReading]:
        """What /sys/class/infiniband would show on a node at time t (rail i = GPU i)."""
        node = self._nodes[node_name]
        rate = node.ib_rate_gbps * 1e9 / 8
        since_boot = t + BOOT_BEFORE_ORIGIN
        out: list[IbPortReading] = []
        for port in range(node.ib_ports):
            sent = 0.0
            wait = 0.0
            for start, pod in self._ib_spans(node_name, port):
                if start > t:
                    continue
                end = self._end(pod)
                stop = t if end is None else min(t, end)
                frac = mean_level_integral(pod.workload, pod.start, pod.start, stop) / max(
                    pod.workload.utilization, 1e-9
                )
                sent += pod.workload.ib_load * rate * frac
                # congestion: the port waits for credits in proportion to load past 90 %
                wait += max(0.0, pod.workload.ib_load - 0.9) * 2e8 * (stop - pod.start)
            base = since_boot * 2e5  # management and storage traffic
            errors = self._ib_errors(node_name, port + 1, t)
            out.append(
                IbPortReading(
                    device=f"mlx5_{port}",
                    port="1",
                    link_layer="InfiniBand",
                    state="ACTIVE",
                    phys_state="LinkUp",
                    up=True,
                    rate_bytes_per_second=rate,
                    transmit_bytes_total=float(int(base + sent) // 4 * 4),
                    receive_bytes_total=float(int(base * 1.1 + sent * 0.98) // 4 * 4),
                    transmit_packets_total=float(int((base + sent) / _IB_MTU)),
                    receive_packets_total=float(int((base * 1.1 + sent * 0.98) / _IB_MTU)),
                    transmit_wait_total=float(int(wait)),
                    errors=errors,
                )
            )
        return out

    def _ib_errors(self, node: str, port: int, t: float) -> tuple[tuple[str, int], ...]:
        symbol = 0
        for f in self.scenario.faults:
            if f.kind == "ib_errors" and f.node == node and f.port == port and t > f.at:
                symbol += int((t - f.at) / 3600 * f.per_hour)
        return (
            ("symbol_error", symbol),
            ("link_error_recovery", symbol // 50),
            ("link_downed", 0),
            ("port_rcv_errors", symbol // 10),
            ("port_xmit_discards", 0),
        )
