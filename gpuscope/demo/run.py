"""``gpuscope demo``: the pipeline on a simulated cluster, with nothing but Python.

One agent per simulated node serves on a loopback port. The collector's store first gets a
simulated week of history (gpuscope/demo/history.py), then scrapes the agents over HTTP for
some seconds, with the simulated cluster's Kubernetes inventory recorded through the same
parsers a real API server's objects go through. Then every detector runs, the alerts engine
delivers to a local webhook sink, the action policies run as a dry run, and the weekly
report is written. Every number printed comes from the stored data, not from the
simulator's own bookkeeping. The analysis windows and alert ``for`` durations are
shortened to fit the live minute.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gpuscope.agent.devices.sim import scenario_clock
from gpuscope.analytics.runner import as_json, render_text
from gpuscope.collector.service import CollectorService
from gpuscope.collector.serving import bind_listen
from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings, load_settings, parse_listen
from gpuscope.core.timefmt import rfc3339
from gpuscope.demo.history import fill_history, monday_before
from gpuscope.demo.parts import (
    AlertSink,
    demo_alerts_config,
    plan_demo_actions,
    record_simulated_inventory,
    run_demo_alerts,
    start_agents,
    stop_agents,
)
from gpuscope.demo.readings_process import frames_in_helper
from gpuscope.service import add_analytics, analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario

DB_NAME = "gpuscope.duckdb"
#: DuckDB's buffer for the demo's database: its maintenance spills past it (docs/storage.md);
#: 256MB left the weekly report's queries a 650 MB peak, 192MB 584 MB, 128MB about 545 MB
#: then (the report's queries need between 96MB and 128MB at DEMO_DB_THREADS; 96MB fails
#: them); the whole demo now peaks at 477-492 MB with it (README, "The demo's figures").
DEMO_DB_MEMORY = "128MB"
#: DuckDB's threads for the demo's database: what a query needs of the buffer grows with
#: them (the report's fit 128MB with 2 to 4 threads, not with 8), so the demo's memory
#: does not grow with the machine's cores. The demo is sized for 2 cores.
DEMO_DB_THREADS = 2
_SET_THREADS = f"SET threads = {DEMO_DB_THREADS}"
STEPS = 7
#: Windows that a run of seconds can fill (the defaults are 30 and 5 minutes).
DEMO_ANALYTICS = {
    "idle_window_minutes": 0.1,
    "startup_grace_minutes": 0,
    "ib_hot_window_minutes": 0.3,
    "interval_minutes": 0.5,
}


def step(n: int, text: str) -> None:
    """The progress display: where the demo is, on stderr."""
    print(f"[{n}/{STEPS}] {text}", file=sys.stderr, flush=True)


class _Bar:
    """A progress bar on a terminal; a line every quarter when stderr is a file or pipe."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def __call__(self, done: float) -> None:
        width = 30
        filled = int(done * width)
        line = f"      [{'#' * filled}{'.' * (width - filled)}] {done:4.0%}"
        if self.tty:
            print(f"\r{line}", end="\n" if done >= 1 else "", file=sys.stderr, flush=True)
        elif int(done * 4) > self.shown:
            self.shown = int(done * 4)
            print(line, file=sys.stderr, flush=True)


def _settings(db: Path, urls: list[str], listen: str, out: Path) -> Settings:
    return load_settings(
        env={},
        overrides={
            "collector": {
                "db": db,
                "targets": [{"url": u} for u in urls],
                "kubernetes": "none",
                # the demo scrapes every second itself; 5 s here is what the idle detector
                # allows between samples (3 intervals) and what --serve schedules
                "scrape_interval_seconds": 5.0,
                "listen": listen,
                # a week's roll-up otherwise takes 80 % of RAM's worth of buffer (1.3 GB)
                "db_memory_limit": DEMO_DB_MEMORY,
            },
            "analytics": DEMO_ANALYTICS,
            "report": {"out_dir": out / "reports"},
        },
    )


def run_demo(
    out: Path | None = None,
    nodes: int = 32,
    serve: bool = False,
    seconds: float = 25.0,
    days: float = 7.0,
    listen: str = "127.0.0.1:8080",
) -> int:
    if nodes < 6:
        raise UserError("--nodes must be at least 6")
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise UserError(f"--listen {listen}: {exc}") from None
    if not 0 <= days <= 14:
        raise UserError("--days must be between 0 and 14")
    out = out or Path(tempfile.mkdtemp(prefix="gpuscope-demo-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: {exc.strerror}") from None
    db = out / DB_NAME
    if db.exists():
        raise UserError(f"{db} exists already; give another --out (nothing was changed)")
    # bound now, so a busy address is one line before minutes of simulation, not after
    sock = bind_listen(host, port, listen) if serve else None
    # Simulated time: the demo's "now" is 00:10 UTC on this week's Monday, so its history
    # ends where a complete ISO week does and the weekly report has that week to tell.
    now0 = monday_before(datetime.now(UTC)) + timedelta(minutes=10)
    offset = [time.time() - now0.timestamp()]

    def clock() -> float:
        return time.time() - offset[0]

    scenario = default_scenario(nodes=nodes, dra=True)
    origin = now0.timestamp() - scenario.live_offset
    cluster = SimulatedCluster(scenario.model_copy(update={"origin": origin}))
    sim_clock = scenario_clock(cluster.scenario, now=clock)
    dra_nodes = sum(1 for n in cluster.scenario.nodes if n.dra)
    step(
        1,
        f"starting {len(cluster.node_names)} simulated agents on loopback: {nodes} nodes of "
        f"8 GPUs and 8 InfiniBand rails, and {dra_nodes} handing their GPUs out through DRA "
        "(ResourceSlices and claims only, one of them MIG)",
    )
    servers = start_agents(cluster, cluster.node_names, sim_clock)
    service: CollectorService | None = None
    sink: AlertSink | None = None
    report_job: _Background | None = None
    try:
        settings = _settings(db, [u for u, _ in servers], listen, out)
        service = CollectorService(settings, clock=clock)
        _demo_db_settings(service)
        if days > 0:
            step(2, f"{days:g} days of history through the store's ingest path, every 5 min")
            _fill_week(service, cluster, [u for u, _ in servers], now0.timestamp(), days, origin)
        # the live data starts where the history ends
        offset[0] = time.time() - now0.timestamp()
        record_simulated_inventory(service, cluster, clock(), origin)
        # roll-ups, compaction of the closed days and of today's closed segments, and the
        # file rewritten without the blocks that freed: the running collector's hourly job,
        # beside the scraping as there (the live minute's scrapes wait out the file's swap);
        # then the weekly report of the closed week, which reads none of the live data
        report_job = _Background(lambda: _after_history(service, out, clock, days))
        step(3, f"scraping every agent over HTTP once a second for {seconds:g} s")
        deadline = time.time() + seconds
        samples = 0
        # and on while the report is written: the detectors' windows (seconds, see
        # DEMO_ANALYTICS) must end in live data, or every workload reads idle and no port
        # hot (a slow machine's report outlasting the scraping did that)
        while time.time() < deadline or report_job.running():
            # cycles start on whole seconds: the store keeps whole-second timestamps, so
            # the intervals between samples (and the rates made of them) are then exact
            time.sleep(1.0 - time.time() % 1.0)
            samples += service.scrape_cycle()
        # the detectors read the roll-ups; and they wait for the report too, so that its
        # peak of memory (the what-if replays) never adds to theirs
        report = report_job.result()
        step(4, f"{service.store.samples_stored():,} samples stored; running every detector")
        at = datetime.fromtimestamp(clock(), UTC)
        analyses = analytics_job(service)
        (out / "findings.json").write_text(json.dumps(as_json(analyses), indent=2, default=str))
        step(5, "alerts to a local webhook sink")
        sink = AlertSink(out / "alerts.log")
        alerts = run_demo_alerts(service, demo_alerts_config(sink.url, out), at)
        step(6, "idle termination and consolidation policies, as a dry run")
        steps = plan_demo_actions(service, out, at)
        step(7, "the weekly report of the week that just ended")
        _print_summary(analyses, alerts, steps, sink, report, db, out, at)
        if sock is not None:
            _serve(service, sock, listen)
    except KeyboardInterrupt:
        pass
    finally:
        if sock is not None:
            sock.close()
        if sink is not None:
            sink.close()
        if report_job is not None:  # it reads the store that is closed next
            report_job.wait()
        if service is not None:
            service.stop()
        stop_agents([server for _, server in servers])
    return 0


def _after_history(
    service: CollectorService,
    out: Path,
    clock: Callable[[], float],
    days: float,
) -> Any:
    """The store's maintenance after the history, then the weekly report of the week that
    ended where the history does."""
    if days > 0:
        service.retention_cycle()
        _demo_db_settings(service)  # a new database instance, if it reopened the file
    return _report(service, out, datetime.fromtimestamp(clock(), UTC))


class _Background:
    """A call run in a thread of its own while the demo goes on; :meth:`result` waits for
    its value and raises what it raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._error: BaseException | None = None
        self._value: Any = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc

    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _demo_db_settings(service: CollectorService) -> None:
    """Have DuckDB's allocator hand freed memory back to the system as it goes (its
    background threads), instead of keeping it for later: without them the week's ingest
    kept about 200 MB more resident, and each heavy query after (roll-ups, the report)
    added its peak on top of that; and DuckDB's threads to :data:`DEMO_DB_THREADS`.
    Settings of the database instance, so set again when the store reopens its file."""
    cur = service.store.cursor()
    try:
        cur.execute("SET allocator_background_threads = true")
        cur.execute(_SET_THREADS)
    finally:
        cur.close()


def _fill_week(
    service: CollectorService,
    cluster: SimulatedCluster,
    urls: list[str],
    end: float,
    days: float,
    origin: float,
) -> None:
    """The history, each 30-minute piece after the inventory as the API server would have
    listed it then (jobs come and go all week: the what-if replays their arrivals and
    departures; none runs shorter than a piece, so each is listed). The readings are
    computed in a helper process while this one stores them and the inventory
    (gpuscope/demo/readings_process.py)."""
    start = end - days * 86_400
    piece = 1800.0
    bar = _Bar()

    def inventory(t: float) -> None:
        if round(t - start) % round(piece) == 0:
            record_simulated_inventory(service, cluster, t, origin, pods_only=t > start)

    fill_history(
        service.store, cluster, dict(zip(cluster.node_names, urls, strict=True)),
        start=start, end=end, origin=origin, before=inventory, progress=bar,
        readings=frames_in_helper,
    )  # fmt: skip


def _report(service: CollectorService, out: Path, at: datetime) -> Any:
    from gpuscope.analytics.report.weekly import weekly_report

    cur = service.store.cursor()
    try:
        return weekly_report(cur, service.settings, now=at, out_dir=out / "reports")
    finally:
        cur.close()


def _print_summary(
    analyses: dict[str, Any],
    alerts: Any,
    steps: list[Any],
    sink: AlertSink,
    report: Any,
    db: Path,
    out: Path,
    at: datetime,
) -> None:
    print(render_text(analyses), end="")
    firing = sum(1 for a in alerts.alerts.values() if a.state == "firing")
    print(
        f"\nalerts: {firing} firing, {len(alerts.notifications)} notification(s) grouped, "
        f"{sink.received} delivered to the local sink ({out / 'alerts.log'})"
    )
    by_kind: dict[str, list[str]] = {}
    for rec in steps:
        target = f"{rec.namespace}/{rec.pod}" if rec.pod else f"node {rec.node}"
        by_kind.setdefault(f"{rec.kind} [{rec.policy}]", []).append(target)
    print("actions, dry run (policies in demo-policies.yaml):")
    for kind, targets in by_kind.items():
        more = f", ... ({len(targets)} in all)" if len(targets) > 3 else ""
        print(f"  would {kind}: {', '.join(targets[:3])}{more}")
    print(f"\n{report.summary.strip()}\n")
    config = out / "demo-settings.yaml"  # its short windows, so the hint reproduces it
    config.write_text(
        yaml.safe_dump(
            {
                "analytics": DEMO_ANALYTICS,
                "collector": {"kubernetes": "none", "scrape_interval_seconds": 5.0},
            },
            sort_keys=False,
        )
    )
    print("\n".join(follow_up_lines(db, out, config, report.html, at)))


def gpuscope_command() -> str:
    """How the user's shell runs this gpuscope: the bare name when PATH finds this very
    installation; else the console script beside the interpreter (a virtual environment's
    bin/, relative to the working directory when below it); else ``python -m``."""
    script = Path(sys.executable).absolute().parent / "gpuscope"
    found = shutil.which("gpuscope")
    if script.is_file():
        if found is not None and Path(found).absolute() == script:
            return "gpuscope"
        try:
            return shlex.quote(str(script.relative_to(Path.cwd().absolute())))
        except ValueError:
            return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m gpuscope.cli.main"


def follow_up_lines(db: Path, out: Path, config: Path, html: Path, at: datetime) -> list[str]:
    """Where the demo's outputs are and the commands that ask again, as they can be pasted:
    the time in RFC 3339 (what ``--at`` takes), the command as the shell can find it."""
    when = rfc3339(at.replace(microsecond=0))  # whole seconds, as people copy it
    cmd = gpuscope_command()
    q = shlex.quote
    return [
        f"simulated time: {when} (history ends there)",
        f"database: {db}",
        f"findings: {out / 'findings.json'}",
        f"actions: {out / 'actions.json'}",
        f"report:   {html}",
        f"the policies again (a dry run): {cmd} act --db {q(str(db))} --policy "
        f"{q(str(out / 'demo-policies.yaml'))} --config {q(str(config))} --at {when}",
        f"again, from the database: {cmd} analyze all --db {q(str(db))} "
        f"--config {q(str(config))} --at {when}",
    ]


def _serve(service: CollectorService, sock: socket.socket, listen: str) -> None:
    """Keep scraping and analysing, with the API and /metrics up on ``listen`` (``sock``),
    until Ctrl-C."""
    import uvicorn

    from gpuscope.collector.http_api.api import create_app

    add_analytics(service)
    service.start_jobs()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service.api_state()), log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://{listen}"
    print(f"serving: {base}/api/v1/status and /metrics (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
