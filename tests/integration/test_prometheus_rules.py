"""The shipped Prometheus alerting rules: valid for `promtool check rules`, and they fire on
the series they are meant for (`promtool test rules`)."""

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuscope.alerts.config import AlertsConfig
from tests.integration.helpers import installed

pytestmark = pytest.mark.integration
RULES = Path(__file__).resolve().parents[2] / "dashboards" / "rules" / "gpuscope-rules.yaml"


def _promtool() -> str:
    return installed("promtool")


def test_promtool_checks_the_rules() -> None:
    out = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_metric_rules_have_the_same_names_as_the_collectors() -> None:
    """Each metric-level rule the collector evaluates has its Prometheus twin of one name."""
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    ours = {r.name for r in AlertsConfig().all_rules() if r.type in ("metric", "target_down")}
    assert ours <= names


UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpuscope_gpu_ecc_errors_total{{node="n1",gpu="0",uuid="GPU-a",type="uncorrected"}}'
        values: '0 0 0 1 1 1 1 1 1 1'
      - series: 'gpuscope_gpu_up{{node="n2",gpu="3",uuid="GPU-b"}}'
        values: '1 1 0 0 0 0 0 0 0 0'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n3",device="mlx5_0",port="1"}}'
        values: '0+2700000000x30'
      - series: 'gpuscope_ib_receive_bytes_total{{node="n3",device="mlx5_0",port="1"}}'
        values: '0+60000000x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n3",device="mlx5_0",port="1"}}'
        values: '50000000x30'
      # receive-side saturation: transmit 10 B/s, receive 95 B/s on a 100 B/s link
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n4",device="mlx5_0",port="1"}}'
        values: '0+600x30'
      - series: 'gpuscope_ib_receive_bytes_total{{node="n4",device="mlx5_0",port="1"}}'
        values: '0+5700x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n4",device="mlx5_0",port="1"}}'
        values: '100x30'
      # one job drives all eight rails of n5 at 90 %: one alert for the node, not eight
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_0",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_1",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_2",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_3",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_4",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_5",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_6",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_transmit_bytes_total{{node="n5",device="mlx5_7",port="1"}}'
        values: '0+5400x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_0",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_1",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_2",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_3",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_4",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_5",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_6",port="1"}}'
        values: '100x30'
      - series: 'gpuscope_ib_port_rate_bytes_per_second{{node="n5",device="mlx5_7",port="1"}}'
        values: '100x30'
      # idle sessions: the collector's gpuscope_findings with their routing labels. nb-1
      # goes from warning to critical at 3m; the team's labels ride on both alerts.
      - series: 'gpuscope_findings{{kind="idle_session",severity="warning",namespace="team-a",pod="nb-1",owner="alice",project="vision"}}'
        values: '_ 1 1 _ _ _'
      - series: 'gpuscope_findings{{kind="idle_session",severity="critical",namespace="team-a",pod="nb-1",owner="alice",project="vision"}}'
        values: '_ _ _ 1 1 1'
      - series: 'gpuscope_findings{{kind="idle_session",severity="warning",namespace="team-b",pod="nb-2",owner="bob",project="nlp"}}'
        values: '_ 1 1 1 1 1'
      # the plain counts (and info findings, which never alert)
      - series: 'gpuscope_findings{{kind="idle_session",severity="warning"}}'
        values: '0 0 0 0 0 0'
      - series: 'gpuscope_findings{{kind="idle_session",severity="info",namespace="team-c",pod="train-0"}}'
        values: '1 1 1 1 1 1'
      # the collector's query source: c1's cycles fail every minute from 3m; c2 is fine
      - series: 'gpuscope_collector_query_failed_cycles_total{{instance="c1",url="http://vm",mode="fleet"}}'
        values: '0 0 0 1 2 3 4 5 6 7 8 9 10 11 12'
      - series: 'gpuscope_collector_query_lag_seconds{{instance="c1",url="http://vm",mode="fleet"}}'
        values: '400x15'
      - series: 'gpuscope_collector_query_failed_cycles_total{{instance="c2",url="http://vm",mode="fleet"}}'
        values: '0x15'
      - series: 'gpuscope_collector_query_lag_seconds{{instance="c2",url="http://vm",mode="fleet"}}'
        values: '380x15'
    alert_rule_test:
      - eval_time: 5m
        alertname: GpuscopeQuerySourceFailing
        exp_alerts: []
      - eval_time: 12m
        alertname: GpuscopeQuerySourceFailing
        exp_alerts:
          - exp_labels: {{instance: c1, url: "http://vm", mode: fleet, severity: critical}}
            exp_annotations:
              summary: "the collector's query source is failing or behind: analytics and alerts judge old data"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#gpuscopequerysourcefailing"
      - eval_time: 2m
        alertname: GpuUncorrectedEccErrors
        exp_alerts: []
      - eval_time: 5m
        alertname: GpuUncorrectedEccErrors
        exp_alerts:
          - exp_labels: {{node: n1, gpu: "0", uuid: GPU-a, type: uncorrected, severity: critical}}
            exp_annotations:
              summary: "GPU 0 on n1 had 1 uncorrected ECC error(s) in the last hour"
              description: "Drain the node and check the GPU (GPU-a)."
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#gpuuncorrectedeccerrors"
      - eval_time: 4m
        alertname: GpuLostFromBus
        exp_alerts: []
      - eval_time: 8m
        alertname: GpuLostFromBus
        exp_alerts:
          - exp_labels: {{node: n2, gpu: "3", uuid: GPU-b, severity: critical}}
            exp_annotations:
              summary: "GPU 3 on n2 stopped answering (fell off the bus?)"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#gpulostfrombus"
      - eval_time: 20m
        alertname: InfinibandLinkHot
        exp_alerts:
          - exp_labels: {{node: n3, severity: warning}}
            exp_annotations:
              summary: "n3: its busiest InfiniBand port runs at 90% of its link rate"
              description: "gpuscope_ib_* on n3 (the InfiniBand dashboard) names the hot ports and their direction."
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#infinibandlinkhot"
          - exp_labels: {{node: n4, severity: warning}}
            exp_annotations:
              summary: "n4: its busiest InfiniBand port runs at 95% of its link rate"
              description: "gpuscope_ib_* on n4 (the InfiniBand dashboard) names the hot ports and their direction."
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#infinibandlinkhot"
          - exp_labels: {{node: n5, severity: warning}}
            exp_annotations:
              summary: "n5: its busiest InfiniBand port runs at 90% of its link rate"
              description: "gpuscope_ib_* on n5 (the InfiniBand dashboard) names the hot ports and their direction."
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#infinibandlinkhot"
      - eval_time: 0m
        alertname: IdleGpuSession
        exp_alerts: []
      - eval_time: 2m
        alertname: IdleGpuSession
        exp_alerts:
          - exp_labels: {{namespace: team-a, pod: nb-1, owner: alice, project: vision, severity: warning}}
            exp_annotations:
              summary: "team-a/nb-1 (owner alice, project vision) holds idle GPUs"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#idlegpusession"
          - exp_labels: {{namespace: team-b, pod: nb-2, owner: bob, project: nlp, severity: warning}}
            exp_annotations:
              summary: "team-b/nb-2 (owner bob, project nlp) holds idle GPUs"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#idlegpusession"
      - eval_time: 2m
        alertname: IdleGpuSessionCritical
        exp_alerts: []
      # escalated: the same IdleGpuSession alert (same labels) still fires, and the
      # critical one joins it, with the same routing labels
      - eval_time: 4m
        alertname: IdleGpuSession
        exp_alerts:
          - exp_labels: {{namespace: team-a, pod: nb-1, owner: alice, project: vision, severity: warning}}
            exp_annotations:
              summary: "team-a/nb-1 (owner alice, project vision) holds idle GPUs"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#idlegpusession"
          - exp_labels: {{namespace: team-b, pod: nb-2, owner: bob, project: nlp, severity: warning}}
            exp_annotations:
              summary: "team-b/nb-2 (owner bob, project nlp) holds idle GPUs"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#idlegpusession"
      - eval_time: 4m
        alertname: IdleGpuSessionCritical
        exp_alerts:
          - exp_labels: {{namespace: team-a, pod: nb-1, owner: alice, project: vision, severity: critical}}
            exp_annotations:
              summary: "team-a/nb-1 (owner alice, project vision) has held idle GPUs for long"
              runbook_url: "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#idlegpusession"
"""


def test_rules_fire_on_their_series(tmp_path: Path) -> None:
    """An uncorrected ECC error, a GPU gone from the bus, hot InfiniBand links (transmit, and
    receive-side: 10 B/s out, 95 B/s in on a 100 B/s link) raise their alerts, one per node
    however many of its ports are hot; idle sessions alert per pod with namespace, owner and
    project, and keep their alert when they turn critical (each with its runbook, and
    nothing fires before its time). Issue 24: the receive side never alerted, a hot job
    paged once per port, and the idle alert had no labels to route."""
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(UNIT_TESTS.format(rules=RULES))
    out = subprocess.run([_promtool(), "test", "rules", str(test_file)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


COMPAT = RULES.parent / "gpuscope-dcgm-compat.yaml"
COMPAT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpuscope_gpu_info{{node="n1",gpu="0",uuid="GPU-a",model="NVIDIA H100",driver_version="550"}}'
        values: '1x5'
      - series: 'gpuscope_gpu_info{{node="n1",gpu="1",uuid="GPU-b",model="NVIDIA H100",driver_version="550"}}'
        values: '1x5'
      - series: 'gpuscope_gpu_utilization_ratio{{node="n1",gpu="0",uuid="GPU-a"}}'
        values: '0.75x5'
      - series: 'gpuscope_gpu_utilization_ratio{{node="n1",gpu="1",uuid="GPU-b"}}'
        values: '0.25x5'
      - series: 'gpuscope_gpu_workload_utilization_ratio{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p1",container="c"}}'
        values: '0.5x5'
      - series: 'gpuscope_gpu_workload_utilization_ratio{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p2",container="c"}}'
        values: '0.25x5'
      - series: 'gpuscope_gpu_workload_memory_used_bytes{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p1",container="c"}}'
        values: '2097152x5'
      - series: 'gpuscope_gpu_info{{node="n1",gpu="2",uuid="GPU-c",model="NVIDIA H100",driver_version="550"}}'
        values: '1x5'
      - series: 'gpuscope_gpu_utilization_ratio{{node="n1",gpu="2",uuid="GPU-c"}}'
        values: '0.9x5'
      - series: 'gpuscope_gpu_workload_utilization_ratio{{node="n1",gpu="2",uuid="GPU-c",namespace="ml",pod="p3",container="c"}}'
        values: '0.9x5'
      - series: 'gpuscope_gpu_memory_used_bytes{{node="n1",gpu="1",uuid="GPU-b"}}'
        values: '1048576x5'
      - series: 'gpuscope_gpu_temperature_celsius{{node="n1",gpu="1",uuid="GPU-b"}}'
        values: '41x5'
    promql_expr_test:
      - expr: DCGM_FI_DEV_GPU_UTIL
        eval_time: 2m
        exp_samples:
          - labels: 'DCGM_FI_DEV_GPU_UTIL{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p1",container="c",model="NVIDIA H100",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100",device="nvidia0"}}'
            value: 50
          - labels: 'DCGM_FI_DEV_GPU_UTIL{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p2",container="c",model="NVIDIA H100",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100",device="nvidia0"}}'
            value: 25
          - labels: 'DCGM_FI_DEV_GPU_UTIL{{node="n1",gpu="0",uuid="GPU-a",model="NVIDIA H100",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100",device="nvidia0"}}'
            value: 75
          - labels: 'DCGM_FI_DEV_GPU_UTIL{{node="n1",gpu="1",uuid="GPU-b",model="NVIDIA H100",UUID="GPU-b",Hostname="n1",modelName="NVIDIA H100",device="nvidia1"}}'
            value: 25
          - labels: 'DCGM_FI_DEV_GPU_UTIL{{node="n1",gpu="2",uuid="GPU-c",namespace="ml",pod="p3",container="c",model="NVIDIA H100",UUID="GPU-c",Hostname="n1",modelName="NVIDIA H100",device="nvidia2"}}'
            value: 90
      - expr: DCGM_FI_DEV_FB_USED
        eval_time: 2m
        exp_samples:
          - labels: 'DCGM_FI_DEV_FB_USED{{node="n1",gpu="0",uuid="GPU-a",namespace="ml",pod="p1",container="c",model="NVIDIA H100",UUID="GPU-a",Hostname="n1",modelName="NVIDIA H100",device="nvidia0"}}'
            value: 2
          - labels: 'DCGM_FI_DEV_FB_USED{{node="n1",gpu="1",uuid="GPU-b",model="NVIDIA H100",UUID="GPU-b",Hostname="n1",modelName="NVIDIA H100",device="nvidia1"}}'
            value: 1
      - expr: avg by (Hostname, modelName) (DCGM_FI_DEV_GPU_TEMP)
        eval_time: 2m
        exp_samples:
          - labels: '{{Hostname="n1",modelName="NVIDIA H100"}}'
            value: 41
"""


def test_dcgm_compat_rules_give_dcgm_exporter_names_per_workload(tmp_path: Path) -> None:
    """A dcgm-exporter dashboard's queries find gpuscope's data: per pod on a shared GPU, the
    GPU's own value where no pod holds it, in dcgm-exporter's units and labels. Issue 38: on
    a shared GPU (GPU-a: p1 and p2) the GPU's own utilization (75) is kept beside each pod's
    share, as dcgm-exporter keeps both; a GPU one pod holds (GPU-c) has its pod's series only."""
    check = subprocess.run([_promtool(), "check", "rules", str(COMPAT)], capture_output=True,
                           text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    test_file = tmp_path / "compat_test.yaml"
    test_file.write_text(COMPAT_TESTS.format(rules=COMPAT))
    out = subprocess.run([_promtool(), "test", "rules", str(test_file)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


#: What NVIDIA's DCGM dashboard (grafana.com 12239, dcgm-exporter's grafana/ folder) reads,
#: written down here as the metric, the labels its queries filter and group on, and the
#: value one GPU's inputs below must give in the metric's unit. Its variables list hosts and
#: GPUs with label_values over DCGM_FI_DEV_FB_FREE (Hostname, then gpu).
DCGM_DASHBOARD = {
    "DCGM_FI_DEV_FB_FREE": 3072,  # MiB: 4 GiB total, 1 GiB used
    "DCGM_FI_DEV_GPU_TEMP": 41,
    "DCGM_FI_DEV_POWER_USAGE": 300,
    "DCGM_FI_DEV_SM_CLOCK": 1980,  # MHz
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.75,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.5,
    "DCGM_FI_DEV_FB_USED": 1024,  # MiB
}
DCGM_DASHBOARD_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpuscope_gpu_info{{node="n1",gpu="0",uuid="GPU-a",mig_instance="",model="NVIDIA H100"}}'
        values: '1x5'
      - series: 'gpuscope_gpu_memory_total_bytes{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '4294967296x5'
      - series: 'gpuscope_gpu_memory_used_bytes{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '1073741824x5'
      - series: 'gpuscope_gpu_temperature_celsius{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '41x5'
      - series: 'gpuscope_gpu_power_watts{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '300x5'
      - series: 'gpuscope_gpu_sm_clock_hertz{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '1980000000x5'
      - series: 'gpuscope_gpu_utilization_ratio{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '0.75x5'
      - series: 'gpuscope_gpu_tensor_active_ratio{{node="n1",gpu="0",uuid="GPU-a",mig_instance=""}}'
        values: '0.5x5'
    promql_expr_test:
{cases}
"""


def test_nvidias_dcgm_dashboard_finds_every_panels_metric(tmp_path: Path) -> None:
    """Issue 24: the DCGM dashboard lists hosts from DCGM_FI_DEV_FB_FREE by Hostname and
    reads SM clocks and GR engine activity, which were not recorded, so it showed nothing.
    Every metric its panels and variables read is now recorded with Hostname and gpu, in
    dcgm-exporter's units."""
    cases = "".join(
        f"""      - expr: max by (Hostname, gpu) ({name}{{Hostname=~"n1", gpu=~"0"}})
        eval_time: 2m
        exp_samples:
          - labels: '{{Hostname="n1",gpu="0"}}'
            value: {value}
"""
        for name, value in DCGM_DASHBOARD.items()
    )
    test_file = tmp_path / "dcgm_dashboard_test.yaml"
    test_file.write_text(DCGM_DASHBOARD_TESTS.format(rules=COMPAT, cases=cases))
    out = subprocess.run([_promtool(), "test", "rules", str(test_file)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


#: NVIDIA's DCGM dashboard as published on grafana.com (12239; the Grafana 6.7 JSON in
#: dcgm-exporter's grafana/ folder, gnetId 12239): variables ``instance`` and ``gpu`` from
#: ``label_values(DCGM_FI_DEV_GPU_TEMP, ...)``, and each panel reads
#: ``METRIC{instance=~"$instance", gpu=~"$gpu"}``: the metric and the value one GPU's inputs
#: give in the metric's unit.
DCGM_12239 = {
    "DCGM_FI_DEV_GPU_TEMP": 41,  # GPU Temperature, GPU Avg. Temp
    "DCGM_FI_DEV_POWER_USAGE": 300,  # GPU Power Usage, GPU Power Total
    "DCGM_FI_DEV_SM_CLOCK": 1980,  # GPU SM Clocks (MHz; the panel multiplies by 10^6)
    "DCGM_FI_DEV_GPU_UTIL": 75,  # GPU Utilization (percent)
    "DCGM_FI_DEV_FB_USED": 1024,  # GPU Framebuffer Mem Used (MiB)
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.5,  # Tensor Core Utilization
}


def test_dashboard_12239_as_published_finds_every_panels_metric(tmp_path: Path) -> None:
    """Issue 38: docs/metrics.md described 12239 with dcgm-exporter's newer JSON (Hostname,
    DCGM_FI_PROF_GR_ENGINE_ACTIVE); the one grafana.com publishes lists instances and GPUs
    from DCGM_FI_DEV_GPU_TEMP and reads DCGM_FI_DEV_GPU_UTIL. The recorded series keep the
    scrape's ``instance`` and gpuscope's ``gpu``, so its variables and panels find them."""
    instance = "10.0.0.5:9402"
    cases = "".join(
        f"""      - expr: max by (instance, gpu) ({name}{{instance=~"{instance}", gpu=~"0"}})
        eval_time: 2m
        exp_samples:
          - labels: '{{instance="{instance}",gpu="0"}}'
            value: {value}
"""
        for name, value in DCGM_12239.items()
    )
    # the variables: label_values(DCGM_FI_DEV_GPU_TEMP, instance) and (..., gpu)
    cases += f"""      - expr: count by (instance, gpu) (DCGM_FI_DEV_GPU_TEMP)
        eval_time: 2m
        exp_samples:
          - labels: '{{instance="{instance}",gpu="0"}}'
            value: 1
"""
    tests = DCGM_DASHBOARD_TESTS.replace('{{node="n1"', f'{{{{instance="{instance}",node="n1"')
    test_file = tmp_path / "dcgm_12239_test.yaml"
    test_file.write_text(tests.format(rules=COMPAT, cases=cases))
    out = subprocess.run([_promtool(), "test", "rules", str(test_file)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_metrics_docs_describe_12239_as_published() -> None:
    """Issue 38: docs/metrics.md gave 12239 variables and queries it does not have. Its
    table now names the published variables and each panel's metric of the JSON above."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    section = docs.split("### Keeping dcgm-exporter dashboards working", 1)[1]
    section = section.split("dcgm-exporter's repository carries a later version", 1)[0]
    assert "label_values(DCGM_FI_DEV_GPU_TEMP, ...)" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert any("`instance`, `gpu` variables" in r and "DCGM_FI_DEV_GPU_TEMP" in r for r in rows)
    [util] = [r for r in rows if r.startswith("| GPU Utilization ")]
    assert "`DCGM_FI_DEV_GPU_UTIL`" in util and "GR_ENGINE" not in util
    for metric in DCGM_12239:
        assert any(f"`{metric}`" in r.split("|")[2] for r in rows[2:]), metric
