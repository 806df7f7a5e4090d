"""The jupyterhub-idle-culler hook (deploy/jupyterhub/gpuscope_cull_arbiter.py) run by the
real culler package against gpuscope's real API over HTTP on loopback.

The culler (jupyterhub-idle-culler 2.0.0, from PyPI) loads the hook from its config file
and calls it as ``hook(inactive=timedelta, inactive_limit=seconds, server=model)`` for each
ready server of a small fake JupyterHub API (tests/fakes/jupyterhub_api.py). gpuscope's side
is the collector's app with a store whose idle analysis ran: a notebook whose GPU is idle
since 10:00, one whose GPU is busy, and pods that hold no GPU.

The hook documented before crashed on every fallback (``inactive`` is a timedelta, not
seconds) and on a 422 (``KeyError: 'stale'``); the culler logs such a crash as
``Error processing USER`` and never culls that user. Each test here asserts which servers
the culler stopped and that it logged no error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from jupyterhub_idle_culler import IdleCuller, cull_idle  # type: ignore[import-untyped]

from gpuscope.analytics.detectors.idle import run_idle
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.settings import AnalyticsSettings
from tests.conftest import free_port
from tests.fakes.jupyterhub_api import CULLER_SCOPES, FakeHub, HubServer
from tests.integration.test_idle import END, T0, Gpu, Work, fill

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "deploy" / "jupyterhub"
HUB_TOKEN = "hub-token-of-the-culler"
API_TOKEN = "gpuscope-read-token"
LIMIT = 3600  # the culler's --timeout
ANALYSED = END.replace(tzinfo=UTC)  # the idle analysis ran at 11:00
IDLE_GPU, BUSY_GPU = Gpu("gpu-node-1", 0), Gpu("gpu-node-1", 1)


@dataclass
class Gpuscope:
    url: str
    now: list[float]  # the API's clock, settable


@pytest.fixture(scope="module")
def gpuscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpuscope]:
    """The collector's API over a store whose idle analysis ran at 11:00: jupyter-alice's
    GPU idle since 10:00, jupyter-bob's busy."""
    import uvicorn

    store = Store.open(tmp_path_factory.mktemp("arbiter") / "s.duckdb")
    works = [
        Work("jhub", "jupyter-alice", "interactive", (IDLE_GPU,)),
        Work("jhub", "jupyter-bob", "interactive", (BUSY_GPU,)),
    ]
    fill(store, [IDLE_GPU, BUSY_GPU], works, lambda g, ts: 0.8 if g == BUSY_GPU else 0.0)
    idle = run_idle(store, ANALYSED, AnalyticsSettings(), WorkloadSettings())
    store.record_findings(idle.findings, ANALYSED, kinds=idle.kinds)
    now = [(ANALYSED + timedelta(minutes=1)).timestamp()]
    state = ApiState(
        store=store,
        targets=TargetRegistry([]),
        metrics=CollectorMetrics(),
        token=API_TOKEN,
        read_requires_token=True,
        clock=lambda: now[0],
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                       lifespan="off")
    )  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the API did not start"
        time.sleep(0.02)
    try:
        yield Gpuscope(f"http://127.0.0.1:{port}", now)
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()


@pytest.fixture
def fresh(gpuscope: Gpuscope) -> Iterator[Gpuscope]:
    """The API's clock a minute after the analysis (restored after the test)."""
    before = gpuscope.now[0]
    gpuscope.now[0] = (ANALYSED + timedelta(minutes=1)).timestamp()
    yield gpuscope
    gpuscope.now[0] = before


def servers(pod_suffix: str = "") -> list[HubServer]:
    """The hub's ready servers; activity is relative to the culler's real clock."""
    now = datetime.now(UTC)
    typing, away = now - timedelta(minutes=5), now - timedelta(hours=2)
    started = now - timedelta(hours=3)

    def hub(user: str, last: datetime | None, *, namespace: bool = True) -> HubServer:
        state = {"pod_name": f"jupyter-{user}{pod_suffix}"}
        if namespace:  # KubeSpawner >= 5 keeps it; older ones do not
            state["namespace"] = "jhub"
        return HubServer(user, last, started if last else None, state)

    return [
        hub("alice", typing),  # GPU idle for the limit: culled although she types
        hub("bob", away, namespace=False),  # GPU busy: kept although nobody types
        hub("carol", away),  # no GPU: the culler's verdict (inactive 2 h: culled)
        hub("erin", typing),  # no GPU, active: kept
        hub("gina", None),  # no activity and no start time: inactive is None
    ]


def write_config(folder: Path, url: str, *, token: str = API_TOKEN) -> Path:
    """The culler's config file, as docs/actions.md shows it."""
    token_file = folder / "gpuscope-token"
    token_file.write_text(token + "\n")
    config = folder / "idle_culler_config.py"
    config.write_text(
        "from gpuscope_cull_arbiter import GpuscopeArbiter\n\n"
        f"c.IdleCuller.timeout = {LIMIT}\n"
        f"c.IdleCuller.cull_arbiter_hook = GpuscopeArbiter({url!r}, namespace='jhub',\n"
        f"    token_file={str(token_file)!r}, timeout_seconds=10)\n"
    )
    return config


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def cull_once(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    hub_servers: list[HubServer],
    *,
    token: str = API_TOKEN,
    scopes: frozenset[str] = CULLER_SCOPES | {"admin:server_state"},
) -> tuple[list[str], list[str]]:
    """One cull cycle as ``IdleCuller.start`` runs it (config file loaded by the culler's
    application, then ``cull_idle`` with its settings): the users stopped, and the hook's
    warnings. Fails on any error the culler logged (a hook that raised)."""
    monkeypatch.syspath_prepend(str(HOOK_DIR))
    app = IdleCuller()
    app.load_config_file(str(write_config(tmp, url, token=token)))
    culler_log, hook_log = Records(), Records()
    app.log.addHandler(culler_log)
    logging.getLogger("gpuscope_cull_arbiter").addHandler(hook_log)
    try:
        with FakeHub(hub_servers, token=HUB_TOKEN, scopes=scopes) as hub:
            asyncio.run(
                cull_idle(
                    url=hub.url,
                    api_token=HUB_TOKEN,
                    inactive_limit=app.timeout,
                    logger=app.log,
                    concurrency=app.concurrency,
                    cull_arbiter=app.cull_arbiter_hook,
                )
            )
    finally:
        app.log.removeHandler(culler_log)
        logging.getLogger("gpuscope_cull_arbiter").removeHandler(hook_log)
    errors = [r.getMessage() for r in culler_log.records if r.levelno >= logging.ERROR]
    assert not errors, errors
    return sorted(hub.stopped), [r.getMessage() for r in hook_log.records]


def test_gpu_holders_are_judged_by_their_gpu(
    fresh: Gpuscope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh analysis: alice's idle GPU culls her active server, bob's busy GPU keeps his
    idle one; pods without a GPU get the culler's own verdict (carol culled, erin kept)."""
    stopped, warnings = cull_once(tmp_path, monkeypatch, fresh.url, servers())
    assert stopped == ["alice", "carol"]
    assert warnings == []


def test_a_stale_analysis_falls_back_to_activity(
    fresh: Gpuscope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh.now[0] = (ANALYSED + timedelta(hours=2)).timestamp()
    stopped, _ = cull_once(tmp_path, monkeypatch, fresh.url, servers())
    assert stopped == ["bob", "carol"]


def test_gpuscope_unreachable_falls_back_to_activity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped, warnings = cull_once(
        tmp_path, monkeypatch, f"http://127.0.0.1:{free_port()}", servers()
    )
    assert stopped == ["bob", "carol"]
    assert len(warnings) == 1 and "cannot reach gpuscope" in warnings[0]


def test_without_the_server_state_scope_it_says_so_and_falls_back(
    fresh: Gpuscope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub token without admin:server_state gets no ``state`` (no pod name)."""
    stopped, warnings = cull_once(tmp_path, monkeypatch, fresh.url, servers(),
                                  scopes=CULLER_SCOPES)  # fmt: skip
    assert stopped == ["bob", "carol"]
    assert len(warnings) == 1 and "admin:server_state" in warnings[0]


def test_a_refused_token_falls_back(
    fresh: Gpuscope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpuscope's read endpoints need the token (collector.read_requires_token): 401."""
    stopped, warnings = cull_once(tmp_path, monkeypatch, fresh.url, servers(), token="wrong")
    assert stopped == ["bob", "carol"]
    assert len(warnings) == 1 and "gpuscope answered 401" in warnings[0]


def test_a_request_gpuscope_rejects_falls_back(
    fresh: Gpuscope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod name gpuscope refuses (longer than Kubernetes allows): 422, no KeyError."""
    stopped, warnings = cull_once(tmp_path, monkeypatch, fresh.url, servers("-" + "x" * 300))
    assert stopped == ["bob", "carol"]
    assert len(warnings) == 1 and "gpuscope answered 422" in warnings[0]


def test_the_culler_process_loads_the_hook_from_its_config_file(
    fresh: Gpuscope, tmp_path: Path
) -> None:
    """``python -m jupyterhub_idle_culler --config=FILE`` with the hook's folder on
    PYTHONPATH, as a hub service runs it: alice (active, GPU idle) is culled, which only
    the hook can decide."""
    config = write_config(tmp_path, fresh.url)
    with FakeHub(servers(), token=HUB_TOKEN, scopes=CULLER_SCOPES | {"admin:server_state"}) as hub:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub_idle_culler", f"--url={hub.url}",
             f"--timeout={LIMIT}", f"--cull-every={LIMIT}", f"--config={config}"],
            env={**os.environ, "JUPYTERHUB_API_TOKEN": HUB_TOKEN, "PYTHONPATH": str(HOOK_DIR)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while sorted(hub.stopped) != ["alice", "carol"]:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, hub.stopped
                time.sleep(0.1)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
    assert "Error processing" not in err and "Traceback" not in err, err


# -- the arbiter's own answer -------------------------------------------------------------------
def test_as_of_is_never_before_idle_since(tmp_path: Path) -> None:
    """With an idle window shorter than the late-sample delay (60 s; the demo's is 6 s),
    the idle state's watermark lags the run: ``as_of`` was 10:59:00 for a GPU idle since
    10:59:15. It is now the time of the analysis the answer comes from."""
    from fastapi.testclient import TestClient

    gpu = Gpu("gpu-node-1", 0)
    store = Store.open(tmp_path / "s.duckdb")
    busy_until = END - timedelta(seconds=45)
    work = Work("jhub", "jupyter-dan", "interactive", (gpu,))
    fill(store, [gpu], [work], lambda g, ts: 0.9 if ts <= busy_until else 0.0, start=T0)
    cfg = AnalyticsSettings(idle_window_minutes=0.25, startup_grace_minutes=0)
    idle = run_idle(store, ANALYSED, cfg, WorkloadSettings())
    store.record_findings(idle.findings, ANALYSED, kinds=idle.kinds)
    state = ApiState(store=store, targets=TargetRegistry([]), metrics=CollectorMetrics(),
                     clock=lambda: ANALYSED.timestamp() + 5)  # fmt: skip
    answer = (
        TestClient(create_app(state))
        .get("/api/v1/arbiter/idle", params={"namespace": "jhub", "pod": "jupyter-dan"})
        .json()
    )
    store.close()
    assert answer["gpu_idle"], answer
    assert datetime.fromisoformat(answer["idle_since"]) > ANALYSED - timedelta(seconds=60)
    assert datetime.fromisoformat(answer["as_of"]) >= datetime.fromisoformat(answer["idle_since"])
    assert datetime.fromisoformat(answer["as_of"]) == ANALYSED
    assert not answer["stale"]
