"""Benchmark: parsing a Prometheus text exposition, gpuscope.collector.scraping.parse against
prometheus_client.

Builds one exposition of N GPUs' worth (8 GPUs per node; ~60 series per GPU with gpuscope's
labels node/gpu/uuid/mig_instance, some with an extra label such as ECC type or NVLink link;
8 InfiniBand ports per node) and reports series/second, best of --runs, for
`gpuscope.collector.scraping.parse.parse_exposition` and for prometheus_client's
`text_string_to_metric_families` (all samples consumed).
Run: .venv/bin/python bench/parse.py [--quick]  (or `python -m bench --only parse`)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families

from bench.figure import Figure, Reference, print_figures
from gpuscope.collector.scraping.parse import parse_exposition

GPUS_PER_NODE = 8
IB_PORTS_PER_NODE = 8
#: per-GPU families: (name, type, extra label name, extra label values)
GPU_FAMILIES: list[tuple[str, str, str, tuple[str, ...]]] = [
    (f"gpuscope_gpu_{m}", "gauge", "", ())
    for m in (
        "up utilization_ratio memory_utilization_ratio memory_used_bytes memory_total_bytes "
        "temperature_celsius power_watts sm_clock_hertz memory_clock_hertz sm_active_ratio "
        "tensor_active_ratio dram_active_ratio fp16_active_ratio fp32_active_ratio "
        "fp64_active_ratio sm_occupancy_ratio graphics_active_ratio pcie_link_gen "
        "pcie_link_width throttle_reasons fan_speed_ratio memory_temperature_celsius "
        "power_limit_watts enforced_power_limit_watts retired_pages xid_last "
        "workload_utilization_ratio workload_memory_used_bytes"
    ).split()
] + [
    ("gpuscope_gpu_energy_joules_total", "counter", "", ()),
    ("gpuscope_gpu_ecc_errors_total", "counter", "type", ("corrected", "uncorrected")),
    ("gpuscope_gpu_pcie_bytes_total", "counter", "direction", ("rx", "tx")),
    ("gpuscope_gpu_nvlink_bytes_total", "counter", "link", tuple(str(i) for i in range(12))),
    ("gpuscope_gpu_nvlink_errors_total", "counter", "link", tuple(str(i) for i in range(12))),
]
IB_FAMILIES = [
    f"gpuscope_ib_{m}"
    for m in (
        "port_up port_rate_bytes_per_second data_counter_saturated transmit_bytes_total "
        "receive_bytes_total transmit_packets_total receive_packets_total transmit_wait_total "
        "symbol_errors_total link_downed_total port_rcv_errors_total excessive_buffer_overrun_total"
    ).split()
]


def build_exposition(gpus: int, seed: int = 1) -> tuple[str, int]:
    """One exposition of `gpus` GPUs; returns (text, number of sample lines)."""
    rng = random.Random(seed)
    nodes = [f"gpu-node-{i:05d}" for i in range(gpus // GPUS_PER_NODE)]
    gpu_labels = []
    for node in nodes:
        for g in range(GPUS_PER_NODE):
            uuid = f"GPU-{rng.getrandbits(128):032x}"
            uuid = f"{uuid[:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:24]}-{uuid[24:]}"
            gpu_labels.append(f'gpu="{g}",mig_instance="",node="{node}",uuid="{uuid}"')
    out: list[str] = []
    series = 0

    def value() -> str:
        return rng.choice(("0.0", "1.0", repr(round(rng.random(), 4)), repr(rng.random() * 1e12)))

    for name, typ, extra, extra_values in GPU_FAMILIES:
        out.append(f"# HELP {name} {name.replace('_', ' ')}.\n# TYPE {name} {typ}\n")
        for lab in gpu_labels:
            for xv in extra_values or ("",):
                full = f'{lab},{extra}="{xv}"' if extra else lab
                out.append(f"{name}{{{full}}} {value()}\n")
                series += 1
    for name in IB_FAMILIES:
        typ = "counter" if name.endswith("_total") else "gauge"
        out.append(f"# HELP {name} {name.replace('_', ' ')}.\n# TYPE {name} {typ}\n")
        for node in nodes:
            for p in range(IB_PORTS_PER_NODE):
                out.append(f'{name}{{device="mlx5_{p}",node="{node}",port="1"}} {value()}\n')
                series += 1
    return "".join(out), series


def ours(text: str) -> int:
    return len(parse_exposition(text).samples)


def prometheus_client(text: str) -> int:
    return sum(len(fam.samples) for fam in text_string_to_metric_families(text))


def best_rate(fn: Callable[[str], int], text: str, expect: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        got = fn(text)
        best = min(best, time.perf_counter() - t0)
        if got != expect:
            raise SystemExit(f"{fn.__name__}: {got} samples, expected {expect}")
    return expect / best


def run(quick: bool = False) -> list[Figure]:
    """Series/s of both parsers on 1,000 and 10,000 GPUs' pages (quick: 200 GPUs, one run)."""
    sizes, runs = ((200,), 1) if quick else ((1000, 10_000), 5)
    figures = []
    for gpus in sizes:
        text, series = build_exposition(gpus)
        ref = best_rate(prometheus_client, text, series, runs)
        mine = best_rate(ours, text, series, runs)
        figures.append(
            Figure(
                f"text-format parsing, {gpus:,} GPUs' pages, gpuscope.collector.scraping.parse",
                mine,
                "series/s",
                aim="several times prometheus_client" if gpus == sizes[0] else None,
                reference=Reference("prometheus_client parser", ref, "series/s"),
                notes=f"{series:,} series, {len(text.encode()) / 2**20:.1f} MiB; best of {runs}",
                key=gpus == sizes[0],
            )
        )
        figures.append(Figure(f"same, {gpus:,} GPUs: speed-up", mine / ref, "×"))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
