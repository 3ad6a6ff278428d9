"""Machine-readable reports (SPEC §6): one JSON document, or JSON Lines."""

from __future__ import annotations

import msgspec

from streams.core.replay import Replay
from streams.core.whatif import WhatIf
from streams.report.coverage import Coverage
from streams.report.data import ReportData
from streams.report.source import Source

__all__ = ["render_json", "render_jsonl"]


def render_json(
    replay: ReportData,
    *,
    partial: bool = False,
    what_if: WhatIf | None = None,
    coverage: Coverage | None = None,
    source: Source | None = None,
) -> str:
    """``{"findings": [...], "health": [...], "destinations": [...],
    "invalid": [...], "summary": {...}}``, findings in SPEC §6 order (workflow
    key, position, kind); ``health`` is the health view (SPEC §4), one entry
    per finding, same order; ``destinations`` the per-sink fence coverage
    (SPEC §6), worst verdict first.
    ``summary.partial`` is true when the audit was interrupted (Ctrl-C).
    ``what_if`` (``--what-if-fenced``): added as ``"what_if"``, next to the
    real findings, which it never replaces.
    ``coverage`` (a topic audit): ``summary.partial_reason`` and
    ``summary.next_offsets`` (per partition, to resume) when the read stopped
    early; ``summary.missing_history`` when partitions had records deleted
    before the read (how many, and the findings on their keys).
    ``source`` (a topic audit): added as ``"source"``, what was read (per
    partition, from and to which offset) and with which settings, so that
    the reports of shards merge (``fencewatch report merge``)."""
    coverage = coverage or Coverage.of(partial)
    health = replay.health()
    findings = replay.latest_findings()
    summary = {**replay.summary(health), "partial": coverage is not None and bool(coverage.partial)}
    if coverage is not None:
        if coverage.partial is not None:
            summary["partial_reason"] = coverage.partial
        if coverage.next_offsets:
            summary["next_offsets"] = {str(p): o for p, o in sorted(coverage.next_offsets.items())}
        summary.update(coverage.summary(findings))
    doc = {
        # The records themselves: msgspec encodes them in one C pass (their
        # field order is the wire order), with no dict built per finding.
        "findings": findings,
        "health": [h.to_dict() for h in health],
        "destinations": [d.to_dict() for d in replay.destinations()],
        "invalid": [i.to_dict() for i in replay.invalid],
        "summary": summary,
    }
    if what_if is not None:
        doc["what_if"] = what_if.to_dict()
    if source is not None:
        doc["source"] = source.to_dict()
    # Indented as orjson's OPT_INDENT_2 always did (tests/report: byte for byte).
    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n"


def render_jsonl(replay: Replay) -> str:
    """One finding (latest revision) per line, same order as the JSON report."""
    return "".join(f.to_json().decode() + "\n" for f in replay.latest_findings())
