"""The layer table: only the Kafka layer and the faust seam import a Kafka client."""

from __future__ import annotations

import ast
from pathlib import Path

STREAMS = Path(__file__).resolve().parents[2] / "streams"

CLIENT_LIBRARIES = {"confluent_kafka", "aiokafka", "kafka", "faust", "mode"}
# Which packages under streams/ may import a Kafka client library.
ALLOWED = {"kafka", "live"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def _package(path: Path) -> str:
    rel = path.relative_to(STREAMS)
    return rel.parts[0] if len(rel.parts) > 1 else f"<{rel.name}>"


def test_only_the_kafka_layer_and_the_faust_seam_import_kafka_clients() -> None:
    """Outside streams/kafka and streams/live no module imports a Kafka client or faust."""
    files = sorted(STREAMS.rglob("*.py"))
    packages = {_package(p) for p in files}
    # The walk really covers every package (a moved tree would make this pass vacuously).
    assert {"cli", "core", "demo", "fences", "kafka", "live", "report", "sdk"} <= packages
    offenders = [
        f"{p.relative_to(STREAMS.parent)}: {sorted(_imported_roots(p) & CLIENT_LIBRARIES)}"
        for p in files
        if _package(p) not in ALLOWED and _imported_roots(p) & CLIENT_LIBRARIES
    ]
    assert offenders == []


def test_the_layer_check_sees_a_client_import(tmp_path: Path) -> None:
    """The AST walk finds function-level and aliased client imports (the check can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from confluent_kafka import Producer\n    import faust as fa\n")
    assert _imported_roots(probe) == {"confluent_kafka", "faust"}


def test_topic_names_are_written_in_one_place() -> None:
    """No module outside streams/kafka/topics.py writes an ownership.* topic name in code."""
    root = STREAMS.parent
    offenders = []
    for path in [*STREAMS.rglob("*.py"), *(root / "fencewatch").rglob("*.py")]:
        if path == STREAMS / "kafka" / "topics.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        offenders += [
            f"{path.relative_to(root)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and "ownership." in node.value
        ]
    assert offenders == []


def test_otel_integration_imports_without_the_kafka_extra() -> None:
    """streams.integrations.otel imports with no Kafka client installed (lazy extras)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('confluent_kafka', 'aiokafka', 'faust', 'mode'): sys.modules[m] = None\n"
        "import streams.integrations.otel\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=STREAMS.parent, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
