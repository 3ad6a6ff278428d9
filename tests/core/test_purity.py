"""The pure core imports no Kafka client, Faust, asyncio, database, clock or environment."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "streams" / "core"

# Modules that must never be loaded by importing the core.
FORBIDDEN_LOADED = {
    "asyncio",
    "faust",
    "mode",
    "aiokafka",
    "confluent_kafka",
    "kafka",
    "psycopg",
    "sqlite3",
    "prometheus_client",
    "aiohttp",
    "threading",
    "subprocess",
    "socket",
}
# Modules our core sources must not import themselves (clock, environment, I/O).
FORBIDDEN_IMPORTED = FORBIDDEN_LOADED | {
    "os",
    "time",
    "datetime",
    "random",
    "sys",
    "io",
    "pathlib",
    "logging",
    "signal",
    "uuid",
}


def test_importing_the_core_loads_no_adapter_module() -> None:
    """A fresh interpreter that imports streams.core has none of the adapter modules loaded."""
    code = (
        "import sys, json; import streams.core, streams.core.replay; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "streams.core.detector" in loaded  # the probe really imported the core
    assert not (loaded & FORBIDDEN_LOADED), sorted(loaded & FORBIDDEN_LOADED)
    assert not any(m.startswith("streams.") and not m.startswith("streams.core") for m in loaded), (
        "the core must not import adapters"
    )


def test_core_sources_import_no_clock_environment_or_io() -> None:
    """No module under streams/core imports os, time, datetime, random, sys or asyncio."""
    offenders: list[str] = []
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN_IMPORTED:
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
