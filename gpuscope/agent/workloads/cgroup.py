"""Which pod and container a process belongs to, read from its cgroup.

The GPU driver lists the processes on each GPU by pid, but knows nothing of pods. The
kubelet puts every container in a cgroup whose path names the pod UID and the container
id, so ``/proc/<pid>/cgroup`` is how a pid on a GPU becomes a pod: that is what catches
several pods sharing one GPU (time-slicing, fractions), which the kubelet's pod-resources
API may show once or not at all.

The path depends on the cgroup version, the cgroup driver (cgroupfs or systemd), the
runtime (containerd, CRI-O, Docker) and nesting (kind, a containerised agent in its own
cgroup namespace sees ``/../..`` prefixes); :func:`parse_cgroup` accepts all of them and
is pure so each form is tested from text alone.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: v1 controllers whose hierarchy kubelet always manages, in the order they are trusted.
_PREFERRED_CONTROLLERS: tuple[str, ...] = ("memory", "cpu", "pids", "devices", "name=systemd")

#: ``pod<uid>`` (cgroupfs driver): the whole path segment.
_CGROUPFS_POD = re.compile(r"^pod(?P<uid>[0-9a-fA-F][0-9a-fA-F_-]*)$")
#: ``...-pod<uid>.slice`` (systemd driver, also kind's ``kubelet-kubepods-...``).
_SYSTEMD_POD = re.compile(r"(?:^|-)pod(?P<uid>[0-9a-fA-F][0-9a-fA-F_-]*)\.slice$")
#: A container id, with the runtime's prefix and systemd's ``.scope`` suffix around it.
_CONTAINER = re.compile(
    r"^(?:(?:cri-containerd|containerd|crio|cri-o|docker|libpod)[-:])?"
    r"(?P<cid>[0-9a-f]{64})(?:\.scope)?$"
)
#: CRI-O's monitor process: it lives beside the container, it is not the container.
_CONMON = re.compile(r"^crio-conmon-[0-9a-f]{64}(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """The pod and container a process runs in.

    ``pod_uid`` is the Kubernetes UID with dashes; ``container_id`` is the runtime's 64-hex
    id with no runtime prefix, or ``""`` for a process in the pod's cgroup but in none of its
    containers.
    """

    pod_uid: str
    container_id: str


def _normalise_uid(raw: str) -> str:
    return raw.replace("_", "-").lower()


def _parse_path(path: str) -> CgroupRef | None:
    """Find the pod segment of one cgroup path and the container segment after it."""
    segments = [s for s in path.split("/") if s]
    for i, segment in enumerate(segments):
        # containerd with the systemd cgroup driver, when it does not create a scope:
        # ``kubepods-burstable-pod<uid>.slice:cri-containerd:<cid>`` in one segment.
        if ":" in segment:
            parts = segment.split(":")
            pod_match = _SYSTEMD_POD.search(parts[0])
            cid_match = _CONTAINER.match(parts[-1])
            if pod_match and cid_match and len(parts) >= 2:
                return CgroupRef(_normalise_uid(pod_match["uid"]), cid_match["cid"])
            continue
        pod_match = _CGROUPFS_POD.match(segment) or _SYSTEMD_POD.search(segment)
        if pod_match is None:
            continue
        uid = _normalise_uid(pod_match["uid"])
        if i + 1 >= len(segments):
            return CgroupRef(uid, "")
        following = segments[i + 1]
        if _CONMON.match(following):
            return None
        cid_match = _CONTAINER.match(following)
        return CgroupRef(uid, cid_match["cid"] if cid_match else "")
    return None


def _ranked_paths(text: str) -> list[str]:
    """The paths of a cgroup file, the hierarchies kubelet surely manages first."""
    ranked: list[tuple[int, str]] = []
    for line in text.splitlines():
        fields = line.strip().split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        names = set(controllers.split(",")) if controllers else set()
        if hierarchy == "0" and not controllers:
            rank = 0  # cgroup v2 (or the unified line of a hybrid host)
        else:
            matched = [r for r, c in enumerate(_PREFERRED_CONTROLLERS, 1) if c in names]
            rank = matched[0] if matched else len(_PREFERRED_CONTROLLERS) + 1
        ranked.append((rank, path))
    ranked.sort(key=lambda item: item[0])
    return [path for _, path in ranked]


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod and container named by the text of a ``/proc/<pid>/cgroup`` file.

    ``None`` for a process that is not in a pod (a host daemon, CRI-O's conmon). A path
    naming only the pod is used when no hierarchy names the container too.
    """
    pod_only: CgroupRef | None = None
    for path in _ranked_paths(text):
        ref = _parse_path(path)
        if ref is None:
            continue
        if ref.container_id:
            return ref
        if pod_only is None:
            pod_only = ref
    return pod_only


def container_of_pid(procfs_root: Path, pid: int) -> CgroupRef | None:
    """The pod and container of ``pid``, or ``None`` if it is not in a pod or has exited.

    Never raises for a process that went away or cannot be read: a GPU's process list is
    a snapshot and its processes may end before their cgroup is read.
    """
    if pid <= 0:
        return None
    path = procfs_root / str(pid) / "cgroup"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        log.debug("cgroup unreadable: process gone pid=%d", pid)
        return None
    except OSError as exc:
        log.debug("cgroup unreadable pid=%d reason=%s", pid, exc.strerror or exc)
        return None
    return parse_cgroup(text)
