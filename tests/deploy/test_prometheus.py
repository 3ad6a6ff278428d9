"""deploy/: the Prometheus alert rules (checked and unit-tested by promtool),
the Grafana dashboard's queries, and the compose wiring."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from streams.live.metrics import LiveMetrics

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "fencewatch.json"

# PromQL words that are not metric names.
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "irate",
    "absent", "offset", "and", "or", "unless", "on", "ignoring", "group_left",
    "group_right", "topk", "bottomk", "histogram_quantile", "delta", "deriv",
    "clamp_min", "clamp_max", "time", "vector", "scalar", "bool",
}  # fmt: skip
# Series Prometheus itself makes (not exported by the processor).
_PROMETHEUS_SERIES = {"up"}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: install the Debian package prometheus (.ci/run does)",
            pytrace=False,
        )
    return found


def _run(*args: str) -> str:
    done = subprocess.run(
        [_promtool(), *args], cwd=PROM, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def registered_series() -> set[str]:
    """Every series name the live processor's registry exports."""
    names: set[str] = set()
    for metric in LiveMetrics().registry.collect():
        names.add(metric.name)
        if metric.type == "counter":  # a labelled counter has no sample until used
            names.add(f"{metric.name}_total")
        names.update(s.name for s in metric.samples)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    stripped = re.sub(r'"[^"]*"', "", expr)  # strings (label values)
    stripped = re.sub(r"\{[^}]*\}", "", stripped)  # label matchers
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # ranges
    stripped = re.sub(r"\b\d+[smhdwy]\b", "", stripped)  # durations (offset 5m)
    stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", stripped)  # groupings
    return {t for t in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped) if t not in _PROMQL_WORDS}


def test_alert_rules_pass_promtool_check() -> None:
    """`promtool check rules alerts.yml` accepts the rules and the config loads them."""
    assert "SUCCESS" in _run("check", "rules", "alerts.yml")
    assert "SUCCESS" in _run("check", "config", "prometheus.yml")


def test_alert_rules_unit_tests_pass() -> None:
    """`promtool test rules alerts.test.yml`: each alert fires when and only when it should."""
    assert "SUCCESS" in _run("test", "rules", "alerts.test.yml")


def test_alert_rules_cover_the_issue_list() -> None:
    """Stale/conflicting commits and stale effects fire at once; the others wait."""
    rules = {
        r["alert"]: r
        for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
        for r in g["rules"]
    }
    for at_once in (
        "FencewatchStaleCommit",
        "FencewatchConflictingCommit",
        "FencewatchDestinationCommittedStaleEffect",
    ):
        assert "for" not in rules[at_once], at_once
    for waits in (
        "FencewatchStaleActivityPersists",
        "FencewatchConsumerLag",
        "FencewatchProcessorDown",
        "FencewatchDeadLettersRising",
    ):
        assert rules[waits]["for"], waits


def test_alert_rules_read_only_metrics_the_processor_exports() -> None:
    """Every metric an alert reads is registered by streams/live/metrics.py (or is `up`)."""
    exported = registered_series()
    used: set[str] = set()
    for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]:
        for r in g["rules"]:
            used |= metric_names(r["expr"])
    assert "fencewatch_findings_total" in used
    assert used - exported - _PROMETHEUS_SERIES == set()


def test_every_dashboard_panel_queries_an_exported_metric() -> None:
    """Each Grafana panel has queries, and each names only metrics the processor registers."""
    exported = registered_series()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len(panels) >= 6
    for panel in panels:
        exprs = [t["expr"] for t in panel["targets"]]
        assert exprs, panel["title"]
        for expr in exprs:
            names = metric_names(expr)
            assert names, (panel["title"], expr)
            assert names <= exported, (panel["title"], names - exported)


def test_every_finding_kind_series_exists_at_zero() -> None:
    """The processor exports each kind's findings counter from the start (increase() needs it)."""
    text = LiveMetrics().exposition().decode()
    from streams.core.records import Kind

    for kind in Kind:
        assert re.search(rf'fencewatch_findings_total\{{kind="{kind.value}",[^}}]*\}} 0\.0', text)


def test_compose_wires_prometheus_and_grafana_to_the_deploy_files() -> None:
    """Prometheus scrapes the port the processor serves; Grafana loads the dashboard."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    cmd = services["fencewatch"]["command"]
    port = cmd[cmd.index("--metrics-port") + 1]
    prom_cfg = yaml.safe_load((PROM / "prometheus.yml").read_text())
    (job,) = prom_cfg["scrape_configs"]
    assert job["job_name"] == "fencewatch"
    assert job["static_configs"][0]["targets"] == [f"fencewatch:{port}"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    grafana = services["grafana"]
    assert grafana["profiles"] == ["grafana"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]


def test_metric_names_reads_names_not_labels_functions_or_durations() -> None:
    """The checker's parser: label values, groupings, ranges and offsets are not metric names."""
    expr = (
        'sum by (job, sink) (increase(a_total{outcome="committed"}[5m])) > 0 or '
        "max without (x) (b_gauge unless b_gauge offset 5m)"
    )
    assert metric_names(expr) == {"a_total", "b_gauge"}
