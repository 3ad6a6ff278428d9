"""docker-compose.yml parses and stays in step with scripts/kafka-local."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
KAFKA_LOCAL = ROOT / "scripts" / "kafka-local"

# Addresses and paths legitimately differ between the two; everything else must match.
_PLACE_SPECIFIC = {
    "listeners",
    "advertised.listeners",
    "controller.quorum.voters",
    "listener.security.protocol.map",
    "log.dirs",
}


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _script_config() -> dict[str, str]:
    out = subprocess.run(
        [str(KAFKA_LOCAL), "print-config", "9092", "9093"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    props: dict[str, str] = {}
    for line in out.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            props[key] = value
    return props


def _env_name(prop: str) -> str:
    # The apache/kafka image maps KAFKA_FOO_BAR to foo.bar.
    return "KAFKA_" + prop.upper().replace(".", "_")


def test_compose_file_parses_with_the_three_services() -> None:
    """The compose file has the broker, a one-shot topic creator, the processor and the console
    on kafka:9092."""
    compose_cli = shutil.which("docker")
    if compose_cli is not None:
        probe = subprocess.run(
            [compose_cli, "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            checked = subprocess.run(
                [compose_cli, "compose", "-f", str(COMPOSE), "config", "--quiet"],
                capture_output=True,
                text=True,
                check=False,
            )
            assert checked.returncode == 0, checked.stderr
    services = _compose()["services"]
    assert set(services) == {"kafka", "topics", "fencewatch", "console", "prometheus", "grafana"}
    assert services["grafana"]["profiles"] == ["grafana"]  # optional
    assert services["topics"]["command"][:5] == [
        "fencewatch", "topics", "create", "--bootstrap-servers", "kafka:9092",
    ]  # fmt: skip
    assert services["topics"]["restart"] == "no"
    assert services["fencewatch"]["command"][:4] == [
        "fencewatch", "run", "--bootstrap-servers", "kafka:9092",
    ]  # fmt: skip
    assert (
        services["fencewatch"]["depends_on"]["topics"]["condition"]
        == "service_completed_successfully"
    )
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    # The console: the same image, published on the host's loopback only.
    assert services["console"]["command"][:4] == [
        "fencewatch", "serve", "--bootstrap-servers", "kafka:9092",
    ]  # fmt: skip
    assert all(str(p).startswith("127.0.0.1:") for p in services["console"]["ports"])
    assert (ROOT / "Dockerfile").is_file()


def test_compose_kafka_version_matches_the_local_script() -> None:
    """The compose image tag is the version in scripts/kafka-version that the script runs."""
    version = (ROOT / "scripts" / "kafka-version").read_text().strip()
    assert _compose()["services"]["kafka"]["image"] == f"apache/kafka:{version}"


def test_compose_broker_settings_match_the_local_script() -> None:
    """Every non-address broker setting of scripts/kafka-local has the same value in compose."""
    env = {k: str(v) for k, v in _compose()["services"]["kafka"]["environment"].items()}
    script = _script_config()
    assert "transaction.state.log.min.isr" in script  # the parse found the settings
    mismatched = {
        key: (value, env.get(_env_name(key)))
        for key, value in script.items()
        if key not in _PLACE_SPECIFIC and env.get(_env_name(key)) != value
    }
    assert mismatched == {}
    heap = next(
        line for line in KAFKA_LOCAL.read_text().splitlines() if "FENCEWATCH_KAFKA_HEAP:-" in line
    )
    assert env["KAFKA_HEAP_OPTS"] in heap
