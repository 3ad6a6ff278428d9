"""Finding records read back from the findings topic: parse, show, and
check against what each demo must produce."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby

from streams.core.findings import Finding
from streams.core.records import Kind
from streams.core.replay import sort_findings
from streams.report.text import describe

__all__ = [
    "REFERENCE_EXPECTED",
    "check_reference",
    "check_split_brain",
    "render_findings",
]

#: SPEC §5: the reference fixture's findings, as (workflow key, kind, raising seq).
REFERENCE_EXPECTED = frozenset(
    {
        ("export-ledger", "stale_activity", 6),
        ("export-ledger", "stale_attempt", 7),
        ("export-ledger", "stale_commit", 8),
        ("export-ledger", "conflicting_commit", 9),
    }
)


def render_findings(findings: Iterable[Finding]) -> list[str]:
    """Lines in the style of the audit's text report: grouped by workflow,
    one sentence per finding, then its recommended action."""
    lines: list[str] = []
    for wkey, group in groupby(sort_findings(list(findings)), key=lambda f: f.workflow_key):
        items = list(group)
        lines.append(f"{wkey}  ({len(items)} finding{'s' if len(items) != 1 else ''})")
        for f in items:
            at = f"seq {f.event_seq}" if f.event_seq is not None else f"offset {f.event_offset}"
            lines.append(
                f"  {f.severity.value.upper():<10} {f.kind.value:<18} {at:<8} {describe(f)}"
            )
            lines.append(f"  {'':<10} action: {f.action}")
    return lines or ["(no findings)"]


def check_reference(latest: Iterable[Finding]) -> list[str]:
    """Problems (empty when none) with the live findings of the reference
    fixture: exactly the four of SPEC §5."""
    got = {(f.workflow_key, f.kind.value, f.event_seq) for f in latest}
    problems = [
        f"missing {k} {kind} at seq {s}" for k, kind, s in sorted(REFERENCE_EXPECTED - got, key=str)
    ]
    problems += [
        f"unexpected {k} {kind} at seq {s}"
        for k, kind, s in sorted(got - REFERENCE_EXPECTED, key=str)
    ]
    return problems


def check_split_brain(
    latest: Iterable[Finding], *, unfenced: bool, workflow_key: str, stale_epoch: int
) -> list[str]:
    """Problems (empty when none) with the split-brain demo's findings.

    Fenced: the displaced worker's late progress and a *rejected* near miss
    (``stale_attempt``, sink outcome ``rejected``), and no commit finding.
    Unfenced: its late progress, its attempt (``committed``), the
    ``stale_commit`` and the ``conflicting_commit`` of the shared effect."""
    items = list(latest)
    if unfenced:
        want = ["conflicting_commit", "stale_activity", "stale_attempt (committed)", "stale_commit"]
    else:
        want = ["stale_activity", "stale_attempt (rejected)"]
    got = sorted(_label(f) for f in items)
    problems = (
        [] if got == want else [f"expected {', '.join(want)}; got {', '.join(got) or 'none'}"]
    )
    for f in items:
        if f.workflow_key != workflow_key:
            problems.append(f"{f.kind.value} on unexpected workflow {f.workflow_key!r}")
        elif f.stale_epoch != stale_epoch:
            problems.append(f"{f.kind.value} names epoch {f.stale_epoch}, not {stale_epoch}")
    return problems


def _label(f: Finding) -> str:
    return f"{f.kind.value} ({f.sink_outcome})" if f.kind is Kind.STALE_ATTEMPT else f.kind.value
