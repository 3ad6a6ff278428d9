"""The human report: findings grouped by workflow, severities easy to spot,
one summary line at the end."""

from __future__ import annotations

from itertools import groupby

from streams.core.destinations import Destination, Verdict
from streams.core.findings import Evidence, Finding
from streams.core.health import CLEARED, Health
from streams.core.records import Confidence, Kind, Severity
from streams.core.whatif import ADDED, REMOVED, Change, WhatIf
from streams.report.coverage import INTERRUPTED, Coverage
from streams.report.data import ReportData
from streams.report.terminal import term_safe

__all__ = [
    "VALUE",
    "change_text",
    "confidence_reason",
    "describe",
    "partial_lines",
    "render_text",
]

_LABEL = {
    # The severity's own word, as the demo and `findings` print it.
    Severity.CRITICAL: "CRITICAL  ",
    Severity.INCIDENT: "INCIDENT  ",
    Severity.WARNING: "WARNING   ",
    Severity.DIAGNOSTIC: "DIAGNOSTIC",
}
# ANSI colours, used only when the CLI says the output is a terminal.
_COLOUR = {
    Severity.CRITICAL: "\x1b[1;37;41m",
    Severity.INCIDENT: "\x1b[1;31m",
    Severity.WARNING: "\x1b[1;33m",
    Severity.DIAGNOSTIC: "\x1b[36m",
}
_RESET = "\x1b[0m"
_ORDER = (Severity.CRITICAL, Severity.INCIDENT, Severity.WARNING, Severity.DIAGNOSTIC)


def _at(f: Finding) -> str:
    return f"seq {f.event_seq}" if f.event_seq is not None else f"offset {f.event_offset}"


def _owner(f: Finding) -> str:
    if f.current_epoch is None:
        return "no earlier acquisition"
    how = "implied by its first evidence" if f.transition_implied else "acquired"
    where = f" at seq {f.transition_seq}" if f.transition_seq is not None else ""
    return f"current owner epoch {f.current_epoch} ({f.current_worker}, {how}{where})"


def describe(f: Finding) -> str:
    """One sentence saying what happened."""
    who = f"epoch {f.stale_epoch} ({f.stale_worker})"
    effect = f'"{f.effect_key}"' if f.effect_key else ""
    if f.kind is Kind.STALE_ACTIVITY:
        return f"{who} still reported progress after losing ownership; {_owner(f)}"
    if f.kind is Kind.STALE_ATTEMPT:
        return (
            f"{who} attempted {effect} after losing ownership; sink outcome: "
            f"{f.sink_outcome}; {_owner(f)}"
        )
    if f.kind is Kind.STALE_COMMIT:
        sink = f" at {f.sink}" if f.sink else ""
        return f"{who} COMMITTED {effect}{sink} after losing ownership; {_owner(f)}"
    epochs = ", ".join(str(e) for e in f.epochs or ())
    if f.kind is Kind.CONFLICTING_COMMIT:
        return (
            f"{effect} committed under epochs {epochs}, at least one stale: outcome "
            f"uncertain until verified; {_owner(f)}"
        )
    if f.kind is Kind.DUPLICATE_COMMIT:
        why = "same owner (a client retry)" if f.same_owner else "repeated across a handover"
        return f"{effect} committed more than once by epochs {epochs}: {why}"
    if f.kind is Kind.EPOCH_REUSE:
        return f"epoch {f.stale_epoch} acquired by two workers (second: {f.stale_worker})"
    return f"{who} acquired after a higher epoch; {_owner(f)}"


#: Each finding enum member's value as a plain str, for the reports' hot
#: loops: ``.value`` is a Python-level property call, where a look-up by a
#: StrEnum member hashes as its str (C). The HTML report reads thousands.
VALUE: dict[str, str] = {m: m.value for e in (Kind, Confidence, Severity) for m in e}


def confidence_reason(f: Finding) -> str:
    """The finding's confidence and the SPEC §4 reason for it, in a phrase."""
    if f.confidence is Confidence.LOW:
        why = "some evidence has no seq, so the order is arrival order"
    elif f.confidence is Confidence.MEDIUM:
        if f.transition_implied:
            why = (
                f"the takeover by epoch {f.current_epoch} is implied by its first evidence, "
                "no lease_acquired was seen before it"
            )
        else:
            why = "no receipt from the destination (sink outcome unknown)"
    else:
        why = "authoritative order" + (
            ", the destination confirmed the commit"
            if f.sink_outcome == "committed"
            else ", the destination's rejection is the receipt"
            if f.sink_outcome == "rejected"
            else ""
        )
    return f"{VALUE[f.confidence]} ({why})"


def _where(e: Evidence) -> str:
    return f"{e.type} by epoch {e.epoch} ({e.worker_id}) at {e.position}"


def _status(h: Health) -> str:
    """The health view's line: what cleared the finding, or what it still needs."""
    if h.status == CLEARED:
        fence = f"fenced ({_where(h.fenced_by)}), " if h.fenced_by is not None else ""
        assert h.verified_by is not None
        return f"CLEARED: {fence}verified ({_where(h.verified_by)})"
    needs = []
    if h.fenced is False:
        needs.append("a fence (no refusal of the stale epoch seen)")
    if h.verified_by is None:
        needs.append("verification (no outcome_verified by the current owner)")
    return "open: needs " + " and ".join(needs)


#: Destinations listed in the text report; --format json has every one.
MAX_DESTINATION_LINES = 50
_VERDICT_LABEL = {
    Verdict.IGNORES_FENCE: "IGNORES FENCE",
    Verdict.ENFORCES_FENCE: "enforces fence",
    Verdict.UNPROVEN: "unproven",
}


def _destination_lines(dests: list[Destination], *, colour: bool) -> list[str]:
    """SPEC §6 destinations: one line per sink, worst verdict first."""
    if not dests:
        return []
    # Escaped before padding: the column lines up as printed.
    sinks = [term_safe(d.sink) for d in dests[:MAX_DESTINATION_LINES]]
    width = max(map(len, sinks))
    lines = ["destinations (does each sink refuse a displaced owner?):"]
    for d, sink in zip(dests[:MAX_DESTINATION_LINES], sinks, strict=True):
        label = f"{_VERDICT_LABEL[d.verdict]:<14}"
        if colour and d.verdict is Verdict.IGNORES_FENCE:
            label = f"{_COLOUR[Severity.INCIDENT]}{label}{_RESET}"
        lines.append(
            f"  {sink:<{width}}  {label}  {d.stale_committed} stale committed, "
            f"{d.stale_rejected} stale rejected, {d.current_committed} current committed"
        )
    if len(dests) > MAX_DESTINATION_LINES:
        lines.append(f"  ... and {len(dests) - MAX_DESTINATION_LINES} more (use --format json)")
    lines.append("")
    return lines


def change_text(c: Change) -> str:
    """What a ``--what-if-fenced`` change does to one finding, in a phrase."""
    if c.change == REMOVED:
        assert c.real is not None
        return f"{c.real.severity.value} {c.real.kind.value} would not be raised"
    if c.change == ADDED:
        assert c.what_if is not None
        return (
            f"would raise {c.what_if.severity.value} {c.what_if.kind.value}: {describe(c.what_if)}"
        )
    real, alt = c.real, c.what_if
    assert real is not None and alt is not None
    parts = []
    for name, before, after in (
        ("kind", real.kind.value, alt.kind.value),
        ("severity", real.severity.value, alt.severity.value),
        ("sink outcome", real.sink_outcome, alt.sink_outcome),
        ("epochs", real.epochs, alt.epochs),
        ("confidence", real.confidence.value, alt.confidence.value),
    ):
        if before != after:
            parts.append(f"{name} {before} -> {after}")
    if alt.kind is Kind.STALE_ATTEMPT and alt.sink_outcome == "rejected":
        parts.append("a rejected near miss")
    return ", ".join(parts) or "evidence differs"


def _what_if_lines(w: WhatIf) -> list[str]:
    """``--what-if-fenced``: what would differ, below the real findings."""
    sinks = ", ".join(w.fenced_sinks)
    lines = [
        term_safe(
            f"what if {sinks} had enforced the fence ({w.converted} stale commit"
            f"{'s' if w.converted != 1 else ''} refused instead of committed):"
        )
    ]
    for sink in w.unseen_sinks:
        lines.append(term_safe(f"  note: no effect event names sink {sink!r}"))
    for c in w.changes:
        f = c.finding
        lines.append(
            term_safe(f"  {f.workflow_key}  {f.kind.value:<18} {_at(f):<10} {change_text(c)}")
        )
    if not w.changes:
        lines.append("  no finding would change")
    alt = w.findings()
    worst = w.replay.worst_severity()
    lines.append(
        f"  would leave {len(alt)} finding{'s' if len(alt) != 1 else ''}"
        + (f", worst {worst.value}" if worst is not None else "")
    )
    lines.append("")
    return lines


def partial_lines(records: int, coverage: Coverage) -> list[str]:
    """The header of a partial report: why the read stopped, and where each
    partition got to (with the --from-offset that resumes it)."""
    why = (
        "interrupted"
        if coverage.partial in (None, INTERRUPTED)
        else f"stopped early ({coverage.partial})"
    )
    lines = [
        term_safe(
            f"PARTIAL REPORT: {why} after {_count(records, 'record')}; "
            "findings and counts cover only what was read"
        )
    ]
    resume = coverage.resume_arg()
    if resume is not None and coverage.next_offsets:
        nexts = ", ".join(f"{p}: {o:,}" for p, o in sorted(coverage.next_offsets.items()))
        lines.append(f"next offset per partition: {nexts} (resume: --from-offset {resume})")
    return lines


def _missing_lines(coverage: Coverage) -> list[str]:
    n = coverage.missing_records
    lines = [
        f"missing history ({_count(n, 'record')} deleted before the audit; findings on keys "
        "of these partitions may lack earlier evidence):"
    ]
    lines.extend(term_safe(f"  {m.text()}") for m in coverage.missing)
    lines.append("")
    return lines


def render_text(
    replay: ReportData,
    *,
    colour: bool = False,
    fail_on: str = "warning",
    partial: bool = False,
    what_if: WhatIf | None = None,
    coverage: Coverage | None = None,
) -> str:
    """``partial``: the audit was interrupted; a header says the report covers
    only the records read. ``what_if`` (``--what-if-fenced``): a section with
    the findings that would change, after the real ones. ``coverage``: why a
    partial read stopped and where (it implies ``partial``), and the
    partitions whose early records were deleted (a section, and a note on
    the confidence of the findings on their keys)."""
    coverage = coverage or Coverage.of(partial)
    findings = replay.latest_findings()
    health_view = replay.health()
    health = {h.finding_id: h for h in health_view}
    lines: list[str] = []
    if coverage is not None and coverage.partial is not None:
        lines.extend(partial_lines(replay.records, coverage))
        lines.append("")
    for wkey, group in groupby(findings, key=lambda f: f.workflow_key):
        items = list(group)
        worst = max(items, key=lambda f: _ORDER[::-1].index(f.severity)).severity
        lines.append(
            term_safe(wkey)
            + f"  ({len(items)} finding{'s' if len(items) != 1 else ''}, worst {worst.value})"
        )
        for f in items:
            label = _LABEL[f.severity]
            if colour:
                label = f"{_COLOUR[f.severity]}{label}{_RESET}"
            # Every line that holds event data goes through term_safe; the
            # colour (ours) is added around the escaped text, never inside it.
            lines.append(
                f"  {label} " + term_safe(f"{f.kind.value:<18} {_at(f):<10} {describe(f)}")
            )
            note = coverage.history_note(f) if coverage is not None else None
            lines.append(
                term_safe(
                    f"             confidence: {confidence_reason(f)}"
                    + (f"; {note}" if note else "")
                )
            )
            lines.append(term_safe(f"             action: {f.action}"))
            lines.append(term_safe(f"             {_status(health[f.finding_id])}"))
        lines.append("")
    lines.extend(_destination_lines(replay.destinations(), colour=colour))
    if what_if is not None:
        lines.extend(_what_if_lines(what_if))
    if replay.invalid_count:
        lines.append(
            f"invalid input ({replay.invalid_count} record"
            f"{'s' if replay.invalid_count != 1 else ''}, skipped):"
        )
        for inv in replay.invalid[:50]:
            where = (
                f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"
            )
            lines.append(
                term_safe(f"  {where}: {inv.field + ': ' if inv.field else ''}{inv.reason}")
            )
        if replay.invalid_count > 50:
            lines.append(f"  ... and {replay.invalid_count - 50} more (use --format json)")
        lines.append("")
    if coverage is not None and coverage.missing:
        lines.extend(_missing_lines(coverage))
    s = replay.summary(health_view)
    by_sev = s["by_severity"]
    counts = ", ".join(
        f"{by_sev[sev.value]:,} {sev.value}" for sev in _ORDER if sev.value in by_sev
    )
    lines.append(
        f"fencewatch audit: {_count(s['events'], 'event')}, {s['invalid']:,} invalid, "
        f"{_count(s['workflows'], 'workflow')}; {_count(s['findings'], 'finding')}"
        + (f" ({counts})" if counts else "")
        + (f", {s['findings_open']:,} open" if s["findings"] else "")
        + (
            f"; {s['redeliveries_dropped']:,} redeliveries dropped"
            if s["redeliveries_dropped"]
            else ""
        )
        + (
            f"; {_count(coverage.missing_records, 'record')} of history missing"
            if coverage is not None and coverage.missing
            else ""
        )
        + f"; fail-on {fail_on}"
    )
    return "\n".join(lines) + "\n"


def _count(n: int, noun: str) -> str:
    """``1 event``, ``2 events``, ``1,500,000 events`` (the summary line reads as English)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
