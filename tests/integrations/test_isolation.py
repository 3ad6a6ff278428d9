"""The integrations stay optional: nothing imports them unless used."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
import streams.cli, streams.sdk, streams.fences, streams.core
loaded = sorted(m for m in sys.modules if m.split(".")[0] in
    {"opentelemetry", "langgraph", "celery", "kombu", "redis"}
    or m.startswith("streams.integrations"))
print(",".join(loaded))
"""


def test_core_sdk_and_cli_import_no_runtime_integration() -> None:
    """Importing the core, the SDK, the fences and the CLI loads no OpenTelemetry,
    LangGraph, Celery or Redis module and no streams.integrations module."""
    out = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
