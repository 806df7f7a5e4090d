"""docs/quickstart.md's "Install on a cluster with the GPU Operator and kube-prometheus-stack"
section matches the chart it walks through: every value it names exists in values.yaml with
the default it states, and its commands render into the objects it says they make.

A renamed or moved value otherwise leaves the walk-through telling a site to `--set` a key
the chart ignores (Helm accepts unknown keys where the schema allows them) or quoting a
default the chart no longer has.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from deploy.render import CHART, objects, render

REPO = Path(__file__).resolve().parents[2]
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
HEADING = "## 5. Install on a cluster with the GPU Operator and kube-prometheus-stack"
MISSING = object()


def section() -> str:
    text = (REPO / "docs" / "quickstart.md").read_text()
    assert HEADING in text, "the quickstart lost its GPU Operator section"
    body = text.split(HEADING, 1)[1]
    return re.split(r"^## ", body, maxsplit=1, flags=re.MULTILINE)[0]


def lookup(path: str) -> Any:
    node: Any = VALUES
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_flags(text: str) -> dict[str, str]:
    """The `--set KEY=VALUE` pairs of the section's commands."""
    pairs = {}
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        words = shlex.split(block.replace("\\\n", " "), comments=True)
        for flag, arg in itertools.pairwise(words):
            if flag == "--set":
                key, _, value = arg.partition("=")
                pairs[key] = value
    pairs.update(dict(re.findall(r"`--set ([\w.]+)=([^`\s]+)`", text)))
    return pairs


def table_rows(text: str) -> list[tuple[list[str], str]]:
    """Each row of the values table: the keys it names and its default cell."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            keys = re.findall(r"`([^`]+)`", cells[0])
            # `a.b.c`, `.d`: a key after the first may name a sibling by its last part
            parent = keys[0].rsplit(".", 1)[0] if keys and "." in keys[0] else ""
            keys = [f"{parent}{k}" if k.startswith(".") and parent else k for k in keys]
            rows.append((keys, cells[1]))
    return rows


def value_paths(text: str) -> set[str]:
    """Every backticked dotted name under one of the chart's top-level values (so
    `nvidia.com/gpu` or Grafana's own `sidecar.dashboards.searchNamespace` are not taken)."""
    names = re.findall(r"`([A-Za-z][\w]*(?:\.[A-Za-z][\w]*)+)`", text)
    return {n for n in names if n.split(".", 1)[0] in VALUES}


def as_stated(value: Any) -> str:
    """A default as the docs write it: YAML's spelling for booleans, `k: v` for a
    one-entry map."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict) and len(value) == 1:
        ((k, v),) = value.items()
        return f"{k}: {as_stated(v) if not isinstance(v, str) else v}"
    return str(value)


def split_outside_backticks(cell: str) -> list[str]:
    """A cell's comma-separated parts, commas inside `...` kept."""
    parts, current, quoted = [], "", False
    for ch in cell:
        if ch == "`":
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()]


def test_every_value_the_section_names_is_in_values_yaml() -> None:
    text = section()
    named = value_paths(text) | set(set_flags(text))
    for keys, _ in table_rows(text):
        named |= set(keys)
    assert {"image.registry", "monitoring.release", "grafana.dashboards.namespace"} <= named
    missing = sorted(n for n in named if lookup(n) is MISSING)
    assert missing == [], f"docs/quickstart.md names values the chart does not have: {missing}"


def test_the_table_states_the_charts_defaults() -> None:
    """Where a row's default cell lists one default per key (`x`, or "empty"), each is the
    chart's; prose defaults ("the chart's appVersion") are checked by the render tests."""
    checked = 0
    for keys, cell in table_rows(section()):
        parts = split_outside_backticks(cell)
        if len(parts) != len(keys):
            continue
        for key, part in zip(keys, parts, strict=True):
            value = lookup(key)
            if part == "empty":
                assert value in ("", {}, []), f"{key}: docs say empty, chart has {value!r}"
                checked += 1
            elif re.fullmatch(r"`[^`]+`", part):
                assert part.strip("`") == as_stated(value), f"{key}: docs {part}, chart {value!r}"
                checked += 1
    assert checked >= 8  # the table's plain defaults are all compared, not none of them


def test_the_install_command_makes_what_the_section_says() -> None:
    """`helm install ... --set ...` as written: images from the registry, the release label
    kube-prometheus-stack selects, the dashboards in Grafana's namespace with the sidecar
    label, and the generated token where the section's `kubectl get secret` reads it."""
    values: dict[str, Any] = {}
    for key, value in set_flags(section()).items():
        if key == "apiToken.existingSecret":  # the bring-your-own variant, checked below
            continue
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        # helm --set reads true/false as booleans (namespace.create=true)
        node[leaf] = {"true": True, "false": False}.get(value, value)
    docs = objects(render(values))
    if values.get("namespace", {}).get("create"):  # the namespace the agent needs, labelled
        (ns,) = (d for d in docs if d["kind"] == "Namespace")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    agent = next(d for d in docs if d["kind"] == "DaemonSet")
    image = agent["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(values["image"]["registry"] + "/gpuscope-agent:")
    monitors = [d for d in docs if d["kind"] in ("ServiceMonitor", "PrometheusRule")]
    assert monitors and {d["metadata"]["labels"]["release"] for d in monitors} == {
        values["monitoring"]["release"]
    }
    dashboards = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboards")
    )
    assert dashboards["metadata"]["namespace"] == values["grafana"]["dashboards"]["namespace"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    read = re.search(
        r"kubectl -n (\S+) get secret (\S+) -o jsonpath='\{\.data\.([\w-]+)\}'", section()
    )
    assert read is not None
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert (secret["metadata"]["namespace"], secret["metadata"]["name"]) == read.group(1, 2)
    assert read.group(3) in secret["data"]


def test_a_secret_of_the_sites_own_is_read_under_the_name_and_key_given() -> None:
    text = section()
    name = set_flags(text)["apiToken.existingSecret"]
    made = re.search(rf"create secret generic {name} \\\n\s+--from-literal=([\w-]+)=", text)
    assert made is not None, "the section no longer shows how to create the Secret it names"
    assert made.group(1) == VALUES["apiToken"]["key"]
    docs = objects(render({"apiToken": {"existingSecret": name}}))
    assert not [d for d in docs if d["kind"] == "Secret"]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "secret")["secret"]
    assert secret_volume["secretName"] == name


def _install_commands(text: str) -> list[list[str]]:
    """The `helm install` commands of a text's ```sh blocks, as words."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["helm", "install"]:
                commands.append(words)
    return commands


def test_the_charts_readme_and_the_quickstart_give_one_install_path() -> None:
    """Issue 38: the chart's README installed with --create-namespace (no pod-security
    label) while the quickstart used namespace.create=true."""
    readme = _install_commands((CHART / "README.md").read_text())
    quick = _install_commands(section())
    assert readme and quick
    for words in readme + quick:
        assert "--create-namespace" not in words, words
        assert "namespace.create=true" in words, words
    # the README's production command is the quickstart's, word for word
    assert quick[0] in readme
