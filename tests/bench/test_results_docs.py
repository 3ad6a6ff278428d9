"""The benchmark documents are generated from bench/results.json, never typed by hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", REPO / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_docs_benchmarks_is_rendered_from_results_json() -> None:
    """docs/benchmarks.md equals what bench/run_all.py renders from the committed results."""
    run_all = _run_all()
    results = json.loads((REPO / "bench" / "results.json").read_text())
    assert (REPO / "docs" / "benchmarks.md").read_text() == run_all.render_doc(results)


def test_readme_performance_table_is_rendered_from_results_json() -> None:
    """The README's table between the bench markers is the one rendered from the results."""
    run_all = _run_all()
    results = json.loads((REPO / "bench" / "results.json").read_text())
    readme = (REPO / "README.md").read_text()
    assert run_all.render_readme(readme, results) == readme


def test_every_figure_with_a_target_has_a_verdict() -> None:
    """Each target in the results was evaluated (met true/false), none silently dropped."""
    results = json.loads((REPO / "bench" / "results.json").read_text())
    figures = [f for e in results["benches"] for f in e["figures"]]
    assert figures
    for fig in figures:
        if fig.get("target"):
            assert fig["met"] in (True, False), fig


def test_discovery_finds_scripts_by_their_make_bench_line() -> None:
    """Scripts with a `# make-bench:` line join the run; helpers without one do not."""
    names = [name for name, _args in _run_all().discover()]
    assert "audit_bench" in names and "live_throughput" in names
    assert "live_support" not in names and "results" not in names and "run_all" not in names
