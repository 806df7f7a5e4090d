"""Generate an InfiniBand sysfs tree shaped like a ConnectX (mlx5) node, for benchmarks."""

from __future__ import annotations

from pathlib import Path

COUNTERS = (
    "excessive_buffer_overrun_errors link_downed link_error_recovery local_link_integrity_errors "
    "multicast_rcv_packets multicast_xmit_packets port_rcv_constraint_errors port_rcv_data "
    "port_rcv_errors port_rcv_packets port_rcv_remote_physical_errors port_rcv_switch_relay_errors "
    "port_xmit_constraint_errors port_xmit_data port_xmit_discards port_xmit_packets "
    "port_xmit_wait "
    "symbol_error unicast_rcv_packets unicast_xmit_packets VL15_dropped"
).split()
HW_COUNTERS = (
    "duplicate_request implied_nak_seq_err lifespan local_ack_timeout_err out_of_buffer "
    "out_of_sequence packet_seq_err req_cqe_error req_cqe_flush_error req_remote_access_errors "
    "req_remote_invalid_request resp_cqe_error resp_cqe_flush_error resp_local_length_error "
    "resp_remote_access_errors rnr_nak_retry_err rx_atomic_requests rx_read_requests "
    "rx_write_requests np_cnp_sent np_ecn_marked_roce_packets rp_cnp_handled rp_cnp_ignored"
).split()


def write_tree(root: Path, devices: int = 8) -> Path:
    """Write ``root/class/infiniband/mlx5_<i>/ports/1/...`` and return ``root``."""
    for d in range(devices):
        dev = root / "class" / "infiniband" / f"mlx5_{d}"
        port = dev / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        (port / "hw_counters").mkdir(exist_ok=True)
        for i, name in enumerate(COUNTERS):
            value = 123_456_789_012_345 + d * 1000 + i if "data" in name else 1000 * (i + 1) + d
            (port / "counters" / name).write_text(f"{value}\n")
        for i, name in enumerate(HW_COUNTERS):
            (port / "hw_counters" / name).write_text(f"{10 if name == 'lifespan' else i * 7}\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "link_layer").write_text("InfiniBand\n")
        (dev / "board_id").write_text("MT_0000000838\n")
        (dev / "fw_ver").write_text("28.39.1002\n")
        (dev / "hca_type").write_text("MT4129\n")
        (dev / "node_guid").write_text(f"a088:c203:00{d:02x}:1c2e\n")
    return root
