"""The single-node development broker of ``scripts/kafka-local``, from a
checkout or from the installed wheel (``fencewatch local``).

The broker's whole lifecycle — jars fetched once into the cache, KRaft
storage formatted, the JVM started detached and waited on until it answers a
Kafka request, pid checks before any signal, the owner watchdog — is that
bash script; the wheel ships it as package data (``streams/_data/kafka-local``)
and this module only finds it and runs it with bash, so the logic exists once.
What it adds for a pip user: a state directory outside any checkout (the
script's default is the checkout's ``.run/kafka``), the name in the log lines,
and the one-line refusals when bash or Java is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

__all__ = [
    "DOCKER_HINT",
    "broker_script",
    "missing_requirement",
    "run_broker_script",
    "state_dir",
]

#: What to use without Java: the same broker image the compose file runs.
DOCKER_HINT = (
    "or run Kafka with Docker: docker compose up -d in a checkout, "
    "or docker run -d -p 9092:9092 apache/kafka:{version} (bootstrap 127.0.0.1:9092)"
)


def _script_dir() -> Path:
    """The directory holding kafka-local, kafka-version and kafka-jars: the
    packaged copy, else the checkout's scripts/."""
    packaged = resources.files("streams") / "_data" / "kafka-local"
    if (packaged / "kafka-local").is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "scripts"
    if (checkout / "kafka-local").is_file():
        return checkout
    raise FileNotFoundError("scripts/kafka-local is neither packaged nor in a checkout")


def broker_script() -> Path:
    """Path of the kafka-local script this installation runs."""
    return _script_dir() / "kafka-local"


def kafka_version() -> str:
    return (_script_dir() / "kafka-version").read_text().strip()


def state_dir(env: Mapping[str, str]) -> Path:
    """Where the broker's config, data, log and pid live: ``FENCEWATCH_KAFKA_DIR``,
    else ``$XDG_STATE_HOME/fencewatch/kafka`` (``~/.local/state/...``): one place
    whatever directory ``fencewatch local`` is run from, so ``stop`` finds what
    ``start`` started."""
    given = env.get("FENCEWATCH_KAFKA_DIR")
    if given:
        return Path(given)
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fencewatch" / "kafka"


def missing_requirement(
    which: Mapping[str, str | None] | None = None, *, java: bool = True
) -> str | None:
    """The one line saying what is missing to run the broker script (bash;
    Java too when ``java``: only a start needs it), or None. ``which``:
    command -> path, for tests; default ``shutil.which``."""

    def find(name: str) -> str | None:
        return which.get(name) if which is not None else shutil.which(name)

    if find("bash") is None:
        return "needs bash on PATH to run the broker script (none found)"
    if java and find("java") is None:
        return (
            "needs Java 17+ on PATH to run a local Kafka broker (none found): install one "
            "(e.g. apt-get install openjdk-17-jre-headless, brew install openjdk@17), "
            + DOCKER_HINT.format(version=_version_or_latest())
        )
    return None


def _version_or_latest() -> str:
    try:
        return kafka_version()
    except OSError:
        return "latest"


def run_broker_script(command: str, args: Sequence[str] = (), *, env: Mapping[str, str]) -> int:
    """Run ``kafka-local COMMAND ARGS`` with bash, its output on ours; its exit status.

    The state directory is :func:`state_dir`; ``FENCEWATCH_PYTHON`` (the
    interpreter the script's ACL step would use) is this one; the broker is
    detached by the script (setsid) and outlives this process unless
    ``FENCEWATCH_KAFKA_OWNER_PID`` names a process it must not outlive."""
    child = dict(env)
    child["FENCEWATCH_KAFKA_DIR"] = str(state_dir(env))
    child.setdefault("FENCEWATCH_PYTHON", sys.executable)
    child.setdefault("FENCEWATCH_KAFKA_LOG_NAME", "fencewatch local")
    bash = shutil.which("bash", path=env.get("PATH", os.defpath)) or "bash"
    return subprocess.run([bash, str(broker_script()), command, *args], env=child).returncode
