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


def test_development_performance_table_is_rendered_from_results_json() -> None:
    """docs/development.md's table between the bench markers is the one rendered from results."""
    run_all = _run_all()
    results = json.loads((REPO / "bench" / "results.json").read_text())
    page = (REPO / "docs" / "development.md").read_text()
    assert run_all.BEGIN in page and run_all.END in page
    assert run_all.render_table_doc(page, results) == page


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


def test_results_digest_matches_their_content() -> None:
    """results.json's digest is the one run_all computes, so a hand-edited figure fails."""
    run_all = _run_all()
    results = json.loads((REPO / "bench" / "results.json").read_text())
    assert results["digest"] == run_all.digest(results)
    edited = json.loads(json.dumps(results))
    edited["benches"][0]["figures"][0]["value"] *= 0.5
    assert run_all.digest(edited) != results["digest"]


def test_figure_names_are_unique_per_engine() -> None:
    """No two figures share a name (each engine's has its own), and a shared one is caught."""
    run_all = _run_all()
    results = json.loads((REPO / "bench" / "results.json").read_text())
    assert run_all.duplicate_names(results) == []
    fig = {"name": "live processor throughput, exactly-once", "value": 1.0}
    twice = {"benches": [{"figures": [fig]}, {"figures": [dict(fig), {"name": "other"}]}]}
    assert run_all.duplicate_names(twice) == ["live processor throughput, exactly-once"]


def test_only_merges_into_the_previous_results() -> None:
    """A --only entry replaces its script's entry and keeps every other script's."""
    run_all = _run_all()
    previous = json.loads((REPO / "bench" / "results.json").read_text())
    scripts = [e["script"] for e in previous["benches"]]
    fresh = {"script": scripts[1], "args": [], "figures": [], "run": {"date": "d", "commit": "c"}}
    merged = run_all.merge(previous, [fresh])
    assert [e["script"] for e in merged["benches"]] == scripts
    assert merged["benches"][1] is fresh
    assert merged["benches"][0] == previous["benches"][0]


def test_history_counts_the_runs_that_met_each_target() -> None:
    """Each targeted row says in how many recorded runs it was met, from the history."""
    run_all = _run_all()
    results: dict[str, object] = {"history": {}}
    fig = {"name": "f", "value": 1.0, "ratio": 0.9, "target": "ratio >= 0.85", "met": True}
    miss = dict(fig, ratio=0.6, met=False)
    for i, one in enumerate([fig, miss, miss]):
        run_all.record_history(results, [{"figures": [one]}], f"d{i}", "c")
    assert run_all.verdict(results, fig) == "ratio >= 0.85: **met** (met in 1 of 3 recorded runs)"
    for i in range(run_all.HISTORY_RUNS + 5):
        run_all.record_history(results, [{"figures": [fig]}], f"e{i}", "c")
    assert len(results["history"]["f"]) == run_all.HISTORY_RUNS  # type: ignore[index]


def test_configured_and_absent_limits_are_labelled() -> None:
    """A configured limit is never shown as measured; a target without a limit says so."""
    run_all = _run_all()
    configured = {
        "limit_name": "session timeout",
        "limit": 10.0,
        "unit": "s",
        "limit_kind": "configured",
        "target": None,
    }
    assert run_all.limit_cell(configured).startswith("configured, not measured: ")
    absolute = {"limit": None, "target": "value <= 250", "unit": "ms"}
    assert run_all.limit_cell(absolute) == "none: an absolute target"
    results = json.loads((REPO / "bench" / "results.json").read_text())
    failover = [f for e in results["benches"] for f in e["figures"] if "failover" in f["name"]]
    assert failover and all(f["limit_kind"] == "configured" for f in failover)


def test_a_figure_of_several_runs_shows_its_spread() -> None:
    """A value and limit summarizing several runs show the lowest and highest run beside them."""
    run_all = _run_all()
    fig = {
        "value": 300.0,
        "unit": "ms",
        "runs": [250.0, 300.0, 1200.0],
        "limit_name": "bare relay (p99)",
        "limit": 200.0,
        "limit_runs": [180.0, 200.0, 3500.0],
        "target": "ratio <= 1",
    }
    assert run_all.value_cell(fig) == "300 ms (median of 3 runs: 250 to 1,200)"
    assert run_all.limit_cell(fig) == "bare relay (p99): 200 ms (median of 3 runs: 180 to 3,500)"
    single = {"value": 300.0, "unit": "ms"}
    assert run_all.value_cell(single) == "300 ms"


def test_a_paired_ratio_is_the_ratio_shown_and_judged() -> None:
    """A figure measured in pairs reports the median of its per-pair ratios
    as its ratio, and its target is judged on that, not on value / limit."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from results import Figure
    finally:
        sys.path.remove(str(REPO / "bench"))
    run_all = _run_all()
    paired = Figure("audit", 2.9, "us", "bare", 1.0, "ratio <= 3", paired_ratio=3.4)
    assert paired.ratio == 3.4
    assert run_all.met(paired.to_dict()) is False
    plain = Figure("audit", 2.9, "us", "bare", 1.0, "ratio <= 3")
    assert plain.ratio == 2.9
    assert run_all.met(plain.to_dict()) is True
