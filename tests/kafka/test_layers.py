"""The layer table: what each package may import, and that only the Kafka layer
and the faust seam import a Kafka client (as tests/core/test_purity.py does for
the core alone)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STREAMS = ROOT / "streams"

CLIENT_LIBRARIES = {"confluent_kafka", "aiokafka", "kafka", "faust", "mode"}
# Which packages may import a Kafka client library: the Kafka layer and the
# live processor (streams/live; its reaches into faust internals sit in
# faust/seam.py: tests/live/test_faust_seam.py).
ALLOWED = {"kafka", "live"}
#: faust's own libraries: within streams/live, only the faust engine's package imports them.
FAUST_LIBRARIES = {"faust", "mode", "aiokafka"}
LIVE = STREAMS / "live"
#: The shared modules of streams/live that may import an engine's package: the
#: runner starts the engine asked for; worker_app.py is the faust app's old name.
ENGINE_PICKERS = {LIVE / "runner.py", LIVE / "worker_app.py"}

# The layer table: every package under streams/ (a top-level module as
# ``<name>``, the root package as ``<streams>``) and the public ``fencewatch``
# package, with the project packages it may import. A package missing here
# fails the test below, so a new one is placed in the table deliberately.
_BASE = {"core", "<errors>"}
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "<streams>": set(),
    "<_native>": set(),
    "<fixtures>": set(),
    # A child process that dies with its parent (PR_SET_PDEATHSIG).
    "<lifeline>": set(),
    "<errors>": {"core"},
    "<extras>": {"core", "<errors>"},
    "kafka": _BASE | {"<lifeline>"},
    "report": {"core", "<errors>"},
    # <extras>: a missing database driver is named by its extra (fences/connect.py).
    "fences": _BASE | {"<extras>", "kafka"},
    "findings": _BASE | {"kafka"},
    "live": _BASE | {"kafka", "<lifeline>"},
    "sdk": _BASE | {"kafka", "fences"},
    "integrations": _BASE | {"<extras>", "kafka", "fences", "sdk"},
    # The topic audit as a library call (fencewatch audit --topic, the demos).
    "audit": _BASE | {"kafka", "report", "findings"},
    "demo": _BASE
    | {"<fixtures>", "<lifeline>", "kafka", "fences", "live", "report", "sdk", "audit", "findings"},
    # The operator console (fencewatch serve): tails the topics, draws the report's timeline.
    "console": _BASE | {"kafka", "findings", "report"},
    "cli": _BASE
    | {"<streams>", "<_native>", "<extras>", "<fixtures>", "<lifeline>"}
    | {"kafka", "fences", "findings", "live", "report", "sdk", "demo", "integrations", "console"}
    | {"audit"},
    "<__main__>": {"cli"},
    # fencewatch.integrations.* re-export the runtime adapters; import
    # fencewatch itself loads none of them (tests/integrations/test_isolation.py).
    "fencewatch": _BASE
    | {"<streams>", "<extras>", "kafka", "fences", "findings", "sdk", "integrations"},
}


def _sources() -> list[Path]:
    return sorted([*STREAMS.rglob("*.py"), *(ROOT / "fencewatch").rglob("*.py")])


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (functions, TYPE_CHECKING too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "streams":  # ``from streams import errors``: a module each
                names.update(f"streams.{a.name}" for a in node.names)
    return names


def _imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _imports(path)}


def _package(path: Path, root: Path = ROOT) -> str:
    if path == root / "fencewatch" / "__main__.py":  # `python -m fencewatch`: the command
        return "<__main__>"
    if path.is_relative_to(root / "fencewatch"):
        return "fencewatch"
    rel = path.relative_to(root / "streams")
    if len(rel.parts) > 1:
        return rel.parts[0]
    return "<streams>" if rel.name == "__init__.py" else f"<{rel.stem}>"


def _unit(module: str, root: Path = ROOT) -> str | None:
    """The layer-table entry a ``streams...``/``fencewatch...`` module belongs to."""
    parts = module.split(".")
    if parts[0] == "fencewatch":
        return "fencewatch"
    if parts[0] != "streams":
        return None
    if len(parts) == 1:
        return "<streams>"
    if (root / "streams" / parts[1]).is_dir():
        return parts[1]
    if (root / "streams" / f"{parts[1]}.py").is_file():
        return f"<{parts[1]}>"
    return None  # ``from streams import __version__``: a name, not a module


def _layer_violations(
    files: list[Path], layers: dict[str, set[str]], root: Path = ROOT
) -> list[str]:
    out = []
    for path in files:
        own = _package(path, root)
        where = path.relative_to(root)
        if own not in layers:
            out.append(f"{where}: package {own!r} is not in the layer table")
            continue
        for name in sorted(_imports(path)):
            unit = _unit(name, root)
            if unit is not None and unit != own and unit not in layers[own]:
                out.append(f"{where}: {own} imports {name} ({unit})")
    return out


def test_every_package_imports_only_what_the_layer_table_allows() -> None:
    """Each package under streams/ and fencewatch/ is in the table and imports only the
    project packages its row lists; the table names no package that is gone and has no circle."""
    files = _sources()
    present = {_package(p) for p in files}
    # The walk really covers every package (a moved tree would make this pass vacuously).
    assert {"cli", "core", "demo", "fences", "kafka", "live", "fencewatch"} <= present
    assert _layer_violations(files, LAYERS) == []
    assert set(LAYERS) == present

    def reaches(start: str, target: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            d == target or (d not in seen and reaches(d, target, seen | {d})) for d in LAYERS[start]
        )

    assert [name for name in LAYERS if reaches(name, name)] == []


def test_the_layer_table_check_fails_on_an_upward_import(tmp_path: Path) -> None:
    """A function-level import of the SDK (above it) in a kafka-layer module is reported,
    and so is a package the table does not know."""
    for package in ("kafka", "sdk"):
        (tmp_path / "streams" / package).mkdir(parents=True)
    probe = tmp_path / "streams" / "kafka" / "probe.py"
    probe.write_text("def f():\n    from streams.sdk.owner import Owner\n")
    assert _layer_violations([probe], LAYERS, tmp_path) == [
        "streams/kafka/probe.py: kafka imports streams.sdk.owner (sdk)"
    ]
    assert _layer_violations([probe], {}, tmp_path) == [
        "streams/kafka/probe.py: package 'kafka' is not in the layer table"
    ]


def test_only_the_kafka_layer_and_the_faust_seam_import_kafka_clients() -> None:
    """Outside streams/kafka and streams/live no module (fencewatch/ included) imports a
    Kafka client or faust."""
    files = _sources()
    packages = {_package(p) for p in files}
    assert {"cli", "core", "demo", "fences", "kafka", "live", "report", "sdk"} <= packages
    offenders = [
        f"{p.relative_to(ROOT)}: {sorted(_imported_roots(p) & CLIENT_LIBRARIES)}"
        for p in files
        if _package(p) not in ALLOWED and _imported_roots(p) & CLIENT_LIBRARIES
    ]
    assert offenders == []


def test_the_layer_check_sees_a_client_import(tmp_path: Path) -> None:
    """The AST walk finds function-level and aliased client imports (the check can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from confluent_kafka import Producer\n    import faust as fa\n")
    assert _imported_roots(probe) == {"confluent_kafka", "faust"}


def _engine(path: Path, live: Path = LIVE) -> str | None:
    """``faust`` or ``rdkafka`` for a module of an engine's package, None for a shared one."""
    rel = path.relative_to(live)
    return rel.parts[0] if len(rel.parts) > 1 else None


def _engine_violations(files: list[Path], root: Path = ROOT) -> list[str]:
    live = root / "streams" / "live"
    pickers = {live / p.name for p in ENGINE_PICKERS}
    out = []
    for path in files:
        own = _engine(path, live)
        where = path.relative_to(root)
        for name in sorted(_imports(path)):
            parts = name.split(".")
            if parts[:2] == ["streams", "live"] and len(parts) > 2:
                other = parts[2] if parts[2] in ("faust", "rdkafka") else None
                if other is not None and other != own and path not in pickers:
                    out.append(f"{where}: imports {name} (the {other} engine)")
            elif parts[0] in FAUST_LIBRARIES and own != "faust":
                out.append(f"{where}: imports {name} (faust's libraries: the faust engine's)")
    return out


def test_each_engine_keeps_to_its_own_package() -> None:
    """In streams/live the faust and the rdkafka engine import nothing of each other, the
    shared modules nothing of either (bar the runner, which starts one), and only the faust
    engine's package imports faust, mode or aiokafka."""
    files = sorted(LIVE.rglob("*.py"))
    assert {_engine(p) for p in files} == {None, "faust", "rdkafka"}  # both packages seen
    assert _engine_violations(files) == []


def test_the_engine_check_sees_a_crossing(tmp_path: Path) -> None:
    """A function-level import of the faust engine in the rdkafka engine, and of faust's
    mode in a shared module, are reported."""
    live = tmp_path / "streams" / "live"
    (live / "rdkafka").mkdir(parents=True)
    engine = live / "rdkafka" / "engine.py"
    engine.write_text("def f():\n    from streams.live.faust.seam import install\n")
    shared = live / "processor.py"
    shared.write_text("import mode\n")
    assert _engine_violations([engine, shared], tmp_path) == [
        "streams/live/rdkafka/engine.py: imports streams.live.faust.seam (the faust engine)",
        "streams/live/processor.py: imports mode (faust's libraries: the faust engine's)",
    ]


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


def test_the_layout_table_names_every_package() -> None:
    """Every package under streams/ has a row in docs/development.md's layout table."""
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    table = page.split("## Layout", 1)[1].split("\n\n", 2)[1]
    packages = sorted(p.name for p in STREAMS.iterdir() if (p / "__init__.py").exists())
    assert packages and table.startswith("| path | what |"), table[:200]
    missing = [p for p in packages if f"`streams/{p}/`" not in table]
    assert not missing, f"docs/development.md's layout table lacks {missing}"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _module_graph(files: list[Path]) -> dict[str, set[str]]:
    modules = {_module(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {d for d in _imports(path) if d in modules and d != name}
    return graph


def test_no_module_imports_itself_through_others() -> None:
    """No import circle between project modules, counting late (in-function) and
    type-only imports: a circle hidden behind a late import is still a circle."""
    assert _cycles(_module_graph(_sources())) == []


def test_the_circle_check_finds_a_hidden_circle(tmp_path: Path) -> None:
    """The check sees a circle made of one top-level and one late import."""
    pkg = tmp_path / "streams" / "p"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from streams.p.b import x\n")
    (pkg / "b.py").write_text("def x():\n    from streams.p.a import y\n")
    graph = {
        "streams.p.a": {"streams.p.b"},
        "streams.p.b": {"streams.p.a"},
    }
    found = {k: {d for d in _imports(pkg / f"{k[-1]}.py") if d in graph} for k in graph}
    assert found == graph
    assert _cycles(found) == [["streams.p.a", "streams.p.b"]]
