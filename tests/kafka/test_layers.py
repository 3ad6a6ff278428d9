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
