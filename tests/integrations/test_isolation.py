"""The integrations stay optional: nothing imports them unless used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUNTIMES = (
    "opentelemetry",
    "langgraph",
    "langchain_core",
    "celery",
    "kombu",
    "redis",
    "temporalio",
)

_CHECK = """
import sys
{imports}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {runtimes!r}
    or m.startswith("streams.integrations"))
print(",".join(loaded))
"""


def _loaded(imports: str) -> list[str]:
    """The runtime and integration modules loaded by ``imports``, in a fresh interpreter."""
    code = _CHECK.format(imports=imports, runtimes=set(RUNTIMES))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    last = out.stdout.rstrip("\n").rsplit("\n", 1)[-1]  # after anything ``imports`` printed
    return [m for m in last.split(",") if m]


def test_core_sdk_and_cli_import_no_runtime_integration() -> None:
    """Importing the public package (fencewatch), streams, the core, the SDK, the
    fences, the findings consumer and the CLI loads no OpenTelemetry, LangGraph,
    LangChain, Celery, Redis or Temporal module and no streams.integrations module."""
    imports = "import fencewatch, streams, streams.cli, streams.sdk, streams.fences"
    imports += ", streams.core, streams.findings"
    assert _loaded(imports) == []


def test_audit_otlp_loads_only_the_pure_otlp_reader(tmp_path: Path) -> None:
    """`fencewatch audit --otlp FILE` needs only streams.integrations.otlp: it
    loads no OpenTelemetry (nor any other runtime) module."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"resourceSpans": []}\n')
    run = f"from streams.cli import main\nmain(['audit', '--otlp', {str(trace)!r}])"
    assert _loaded(run) == ["streams.integrations", "streams.integrations.otlp"]
