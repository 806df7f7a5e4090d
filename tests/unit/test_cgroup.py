"""Mapping a process's cgroup to its pod and container, for every path form in the wild."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.agent.workloads.cgroup import CgroupRef, container_of_pid, parse_cgroup

UID = "1b2c3d4e-5f60-4718-9a2b-3c4d5e6f7081"
UID_SYSTEMD = UID.replace("-", "_")
CID = "a" * 8 + "0123456789abcdef" * 3 + "b" * 8
assert len(CID) == 64


def _v1(path: str) -> str:
    """A cgroup v1 file as the kernel writes it, with ``path`` in every hierarchy."""
    lines = [
        f"12:pids:{path}",
        "11:hugetlb:/",
        f"10:memory:{path}",
        f"9:devices:{path}",
        f"4:cpu,cpuacct:{path}",
        f"1:name=systemd:{path}",
        "0::/",
    ]
    return "\n".join(lines) + "\n"


def _v2(path: str) -> str:
    return f"0::{path}\n"


@pytest.mark.parametrize(
    ("path", "qos"),
    [
        (f"/kubepods/besteffort/pod{UID}/{CID}", "besteffort"),
        (f"/kubepods/burstable/pod{UID}/{CID}", "burstable"),
        (f"/kubepods/pod{UID}/{CID}", "guaranteed"),
    ],
)
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cgroupfs_driver_paths(path: str, qos: str, version: str) -> None:
    """The cgroupfs driver's ``pod<uid>/<cid>`` form, for every QoS class, v1 and v2."""
    text = _v1(path) if version == "v1" else _v2(path)
    assert parse_cgroup(text) == CgroupRef(UID, CID), qos


@pytest.mark.parametrize(
    "scope",
    [f"cri-containerd-{CID}.scope", f"crio-{CID}.scope", f"docker-{CID}.scope"],
)
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_systemd_driver_scopes_and_uid_underscores(scope: str, version: str) -> None:
    """The systemd driver: underscores in the slice become dashes, the runtime prefix goes."""
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_SYSTEMD}.slice/{scope}"
    )
    text = _v1(path) if version == "v1" else _v2(path)
    assert parse_cgroup(text) == CgroupRef(UID, CID)


def test_systemd_guaranteed_pod_slice() -> None:
    """A guaranteed pod sits directly under kubepods.slice as ``kubepods-pod<uid>.slice``."""
    path = f"/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    assert parse_cgroup(_v2(path)) == CgroupRef(UID, CID)


def test_short_uid_normalised_with_dashes() -> None:
    """Any underscore in the systemd UID becomes a dash, whatever its length."""
    path = (
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod1b2c_3d4e.slice/crio-{CID}.scope"
    )
    assert parse_cgroup(_v2(path)) == CgroupRef("1b2c-3d4e", CID)


def test_crio_conmon_scope_is_not_the_container() -> None:
    """CRI-O's conmon lives beside the container in the pod slice: it is no workload."""
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-conmon-{CID}.scope"
    )
    assert parse_cgroup(_v2(path)) is None
    assert parse_cgroup(_v1(path)) is None


def test_kind_nested_kubelet_slice() -> None:
    """kind (kubelet in a container) nests everything under ``kubelet.slice``."""
    path = (
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    )
    assert parse_cgroup(_v2(path)) == CgroupRef(UID, CID)


def test_containerd_systemd_form_with_colons() -> None:
    """containerd's ``<slice>:cri-containerd:<cid>`` single-segment form."""
    path = (
        "/system.slice/containerd.service/"
        f"kubepods-burstable-pod{UID_SYSTEMD}.slice:cri-containerd:{CID}"
    )
    assert parse_cgroup(_v2(path)) == CgroupRef(UID, CID)
    assert parse_cgroup(_v1(path)) == CgroupRef(UID, CID)


def test_agent_in_its_own_cgroup_namespace_sees_dotdot_prefix() -> None:
    """A containerised agent reading host pids sees paths relative to its own cgroup."""
    path = f"/../../kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    assert parse_cgroup(_v2(path)) == CgroupRef(UID, CID)


def test_nested_cgroup_inside_container_still_maps_to_it() -> None:
    """A process in a sub-cgroup the container made is still that container's."""
    path = f"/kubepods/burstable/pod{UID}/{CID}/worker"
    assert parse_cgroup(_v2(path)) == CgroupRef(UID, CID)


def test_preferred_v1_controller_wins_over_others() -> None:
    """On v1 the memory/cpu/pids lines decide, not an odd hierarchy like net_cls."""
    other = "f" * 64
    text = (
        f"7:net_cls,net_prio:/kubepods/besteffort/pod{UID}/{other}\n"
        f"10:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    )
    assert parse_cgroup(text) == CgroupRef(UID, CID)


def test_pod_level_cgroup_without_container() -> None:
    """A process in the pod cgroup but in no container keeps the pod, no container id."""
    assert parse_cgroup(_v2(f"/kubepods/burstable/pod{UID}")) == CgroupRef(UID, "")


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/nvidia-persistenced.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",
        _v1("/system.slice/sshd.service"),
        "",
        "garbage without colons\n",
    ],
)
def test_non_pod_processes(text: str) -> None:
    """Host daemons, user sessions and unreadable text are not in a pod."""
    assert parse_cgroup(text) is None


def test_container_of_pid_reads_procfs(tmp_path: Path) -> None:
    """``<procfs>/<pid>/cgroup`` is read and parsed."""
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(_v2(f"/kubepods/pod{UID}/{CID}"))
    assert container_of_pid(tmp_path, 4242) == CgroupRef(UID, CID)


def test_container_of_pid_exited_or_host_process(tmp_path: Path) -> None:
    """An exited pid (no directory) and a host process give ``None``, never an exception."""
    assert container_of_pid(tmp_path, 999) is None
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/sshd.service\n")
    assert container_of_pid(tmp_path, 7) is None
    assert container_of_pid(tmp_path, 0) is None
