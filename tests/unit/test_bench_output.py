"""The benchmark runner's writers: JSON, Markdown tables, the README's generated section."""

import json
import math
from pathlib import Path

import pytest

import bench.__main__ as bench_main
from bench.figure import Figure, ModuleResult, Reference, format_value
from bench.output import (
    END,
    START,
    markdown,
    read_results,
    replace_generated,
    results_json,
    update_readme,
)
from bench.runner import Benchmark, run_one, select

MACHINE = {
    "cpu": "Test CPU 9000",
    "cores": 2,
    "memory_gib": 8.0,
    "os": "Debian GNU/Linux 12",
    "python": "3.11.7",
    "duckdb": "1.0.0",
    "node_exporter": None,
    "promtool": "2.42.0",
    "date": "2026-01-05 10:00 UTC",
}
AGENT = ModuleResult(
    "agent_scrape",
    "Agent",
    "ok",
    1.0,
    (
        Figure(
            "InfiniBand scrape",
            2.1,
            "ms CPU",
            aim="no slower than node_exporter",
            reference=Reference.not_installed("node_exporter"),
            key=True,
        ),
        Figure("resident memory", 38.4, "MiB", notes="sim GPUs"),
    ),
)
STORE = ModuleResult(
    "store",
    "Collector",
    "ok",
    2.0,
    (
        Figure(
            "bytes per sample",
            2.6,
            "B/sample",
            aim="≤ 0.85 × Prometheus",
            reference=Reference("Prometheus 2.42.0 chunks", 5.15, "B/sample"),
        ),
    ),
)
BROKEN = ModuleResult("api", "Collector", "error", 0.5, (), "RuntimeError: boom")
ABSENT = ModuleResult("report", "Weekly report", "missing", error="module not present")
MODULES = [AGENT, STORE, BROKEN, ABSENT]


def test_markdown_has_one_table_per_area_with_references_and_aims() -> None:
    md = markdown(MACHINE, MODULES, quick=False)
    assert md.startswith("Last run 2026-01-05 10:00 UTC on Test CPU 9000 (2 cores, 8.0 GiB)")
    assert "node_exporter not installed, promtool 2.42.0" in md.splitlines()[0]
    assert md.count("| what | measured | reference (same run) | aim |") == 2
    assert "### Agent" in md and "### Collector" in md
    agent_row = "| InfiniBand scrape | **2.10 ms CPU** | not installed (node_exporter) "
    assert agent_row + "| no slower than node_exporter |" in md
    assert "| resident memory (sim GPUs) | 38.4 MiB |  |  |" in md
    assert "| 5.15 B/sample (Prometheus 2.42.0 chunks) | ≤ 0.85 × Prometheus |" in md
    # a failed module is named under its area; a module not written yet gets no table
    assert "- `api`: not measured (RuntimeError: boom)" in md
    assert "### Weekly report" not in md
    assert "Not present yet: `bench/report.py`." in md
    assert "Quick run" not in md
    assert "Quick run" in markdown(MACHINE, MODULES, quick=True)


def test_json_is_valid_and_reads_back_to_the_same_figures() -> None:
    nan = ModuleResult("parse", "Collector", "ok", 0.1, (Figure("rate", math.nan, "x/s"),))
    text = results_json(MACHINE, [*MODULES, nan], quick=True)
    doc = json.loads(text)  # strict JSON: NaN written as null
    assert doc["quick"] is True and doc["machine"]["cpu"] == "Test CPU 9000"
    assert [m["status"] for m in doc["modules"]] == ["ok", "ok", "error", "missing", "ok"]
    assert doc["modules"][0]["figures"][0]["reference"]["missing"] == "not installed"
    assert doc["modules"][4]["figures"][0]["value"] is None
    machine, modules, quick = read_results(text)
    assert machine == MACHINE and quick
    assert modules[:4] == MODULES
    assert math.isnan(modules[4].figures[0].value)


README = """# gpuscope

## Performance

Prose before the tables.

<!-- bench:start -->
| old | table |
<!-- bench:end -->

Prose after the tables, kept as written.

## Layout
"""


def test_readme_update_replaces_only_the_marked_section_and_is_idempotent() -> None:
    once = replace_generated(README, "| new | table |\n")
    assert "| old | table |" not in once
    assert "| new | table |" in once
    before, after = README.split(START, maxsplit=1)[0], README.split(END)[1]
    assert once.startswith(before) and once.endswith(after)
    assert replace_generated(once, "| new | table |\n") == once


@pytest.mark.parametrize(
    "readme",
    [
        "no markers",
        f"{START} only the start",
        f"{END} before {START}",
        f"{START} {END} {START} {END}",
    ],
)
def test_readme_without_one_ordered_marker_pair_is_refused(readme: str) -> None:
    with pytest.raises(ValueError, match="bench:"):
        replace_generated(readme, "x")


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (541.0, "series", "541 series"),
        (628431.7, "series/s", "628,000 series/s"),
        (3.712, "ms CPU", "3.71 ms CPU"),
        (43.27, "ms", "43.3 ms"),
        (0.0912, "s", "0.0912 s"),
        (0.5, "×", "0.5×"),
        (None, "ms", "n/a"),
    ],
)
def test_values_are_written_to_three_significant_digits(
    value: float | None, unit: str, text: str
) -> None:
    assert format_value(value, unit) == text


def test_a_listed_module_not_written_yet_is_missing_not_a_crash() -> None:
    result = run_one(Benchmark("no_such_benchmark_yet", "Somewhere"), quick=True)
    assert result.status == "missing" and result.figures == ()


def test_a_failing_module_is_reported_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(quick: bool) -> list[Figure]:
        raise RuntimeError("disk full")

    monkeypatch.setattr("bench.runner.load", lambda name: explode)
    result = run_one(Benchmark("parse", "Collector"), quick=True)
    assert result.status == "error" and result.error == "RuntimeError: disk full"


def test_unknown_benchmark_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown benchmark nope"):
        select(["parse", "nope"])
    assert [b.name for b in select(["store", "parse"])] == ["parse", "store"]


def test_main_writes_results_merges_only_runs_and_updates_the_readme(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    monkeypatch.setattr(bench_main, "describe_machine", lambda: MACHINE)
    monkeypatch.setattr(bench_main, "run_all", lambda chosen, quick, on_result=None: [AGENT, STORE])
    args = ["--out", str(tmp_path), "--readme", str(readme)]
    assert bench_main.main([*args, "--update-readme"]) == 0
    assert "| InfiniBand scrape |" in readme.read_text()
    assert "Prose after the tables, kept as written." in readme.read_text()
    # re-running one module keeps the others' figures from the previous run
    fresh = ModuleResult("store", "Collector", "ok", 1.0, (Figure("bytes per sample", 2.0, "B"),))
    monkeypatch.setattr(bench_main, "run_all", lambda chosen, quick, on_result=None: [fresh])
    assert bench_main.main([*args, "--only", "store"]) == 0
    _, modules, _ = read_results((tmp_path / "results.json").read_text())
    assert modules == [AGENT, fresh]
    # quick figures never reach the README
    assert bench_main.main([*args, "--quick", "--update-readme"]) == 2


def test_each_finished_benchmark_is_written_before_the_next_one_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An interrupted run keeps the figures of the benchmarks that finished."""
    monkeypatch.setattr(bench_main, "describe_machine", lambda: MACHINE)
    results = {"agent_scrape": AGENT, "store": STORE}

    def run_one(bench: Benchmark, quick: bool) -> ModuleResult:
        if bench.name == "store":
            # the agent's figures are on disk before the second benchmark starts...
            _, written, _ = read_results((tmp_path / "results.json").read_text())
            assert written == [AGENT]
            raise KeyboardInterrupt  # ...and stay there when the run is stopped
        return results[bench.name]

    monkeypatch.setattr("bench.runner.run_one", run_one)
    with pytest.raises(KeyboardInterrupt):
        bench_main.main(["--out", str(tmp_path), "--only", "agent_scrape", "store"])
    _, kept, _ = read_results((tmp_path / "results.json").read_text())
    assert kept == [AGENT]


def test_the_project_readme_has_its_generated_section_marked() -> None:
    """`python -m bench --update-readme` would refuse a README without one marker pair."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    updated = replace_generated(readme, "TABLES")
    assert "TABLES" in updated and "### How the figures were reached" in updated


def test_each_area_table_is_printed_once_even_if_a_module_is_listed_twice() -> None:
    """A merge of an old and a fresh run must not print a module's figures twice."""
    newer = ModuleResult(
        "agent_scrape", "Agent", "ok", 1.0, (Figure("resident memory", 30.5, "MiB"),)
    )
    md = markdown(MACHINE, [AGENT, STORE, newer], quick=False)
    assert md.count("### Agent") == 1 and md.count("### Collector") == 1
    assert md.count("| resident memory |") == 1 and "30.5 MiB" in md
    assert "InfiniBand scrape" not in md  # the later result of the module replaced the earlier


def test_readme_gets_the_tables_once_however_often_it_is_updated(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    generated = markdown(MACHINE, MODULES, quick=False)
    assert update_readme(readme, generated) is True
    assert update_readme(readme, generated) is False
    text = readme.read_text()
    assert text.count("### Agent") == 1 and text.count("### Collector") == 1
    assert text.count("| InfiniBand scrape |") == 1


def test_a_copy_of_the_generated_tables_outside_the_markers_is_refused() -> None:
    generated = markdown(MACHINE, MODULES, quick=False)
    pasted = README.replace("Prose after the tables", generated + "\nProse after the tables")
    with pytest.raises(ValueError, match="outside the bench markers"):
        replace_generated(pasted, generated)
    heading_only = README.replace("## Layout", "### Agent\n\n## Layout")
    with pytest.raises(ValueError, match="### Agent"):
        replace_generated(heading_only, generated)


def test_each_module_says_when_it_was_measured() -> None:
    """`--only` re-runs some modules and keeps the others' earlier figures: each table's
    source line carries its own module's date, and the date survives the JSON."""
    dated = ModuleResult("agent_scrape", "Agent", "ok", 1.0, AGENT.figures,
                         measured="2026-01-06 09:30 UTC")  # fmt: skip
    md = markdown(MACHINE, [dated, STORE], quick=False)
    assert "From `bench/agent_scrape.py` (2026-01-06 09:30 UTC)." in md
    assert "From `bench/store.py`." in md  # an older result without a date: none invented
    _, modules, _ = read_results(results_json(MACHINE, [dated], quick=False))
    assert modules[0].measured == "2026-01-06 09:30 UTC"
