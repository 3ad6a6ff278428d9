"""A self-contained HTML report with one ownership timeline per workflow that
has findings: a lane per epoch, a mark per event, the raising events ringed."""

from __future__ import annotations

from html import escape
from itertools import groupby

from streams.core.findings import Evidence, Finding
from streams.core.records import Severity
from streams.core.replay import Replay
from streams.report.text import describe

__all__ = ["MAX_TIMELINES", "render_html"]

#: Timelines drawn; the table still lists every finding past this.
MAX_TIMELINES = 200

_SEV_COLOUR = {
    Severity.CRITICAL: "#b00020",
    Severity.INCIDENT: "#d84315",
    Severity.WARNING: "#f9a825",
    Severity.DIAGNOSTIC: "#0277bd",
}
_TYPE_MARK = {
    "lease_acquired": ("#2e7d32", "A"),
    "lease_released": ("#757575", "R"),
    "progress": ("#90a4ae", "p"),
    "effect_attempted": ("#6a1b9a", "a"),
    "effect_committed": ("#000000", "C"),
    "effect_rejected": ("#00838f", "x"),
    "outcome_verified": ("#1565c0", "V"),
}
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0} td,th{padding:3px 8px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}
td.nw{white-space:nowrap}
.sev{color:#fff;border-radius:3px;padding:1px 6px;font-weight:600;font-size:12px}
.summary{background:#f5f5f5;padding:.7em 1em;border-radius:4px}
svg text{font:11px monospace}
"""


def _timeline_svg(events: list[Evidence], findings: list[Finding]) -> str:
    if not events:
        return ""
    epochs = sorted({e.epoch for e in events}, reverse=True)
    lane = {ep: i for i, ep in enumerate(epochs)}
    step, left, top, row = 34, 90, 14, 26
    width = left + step * (len(events) + 1)
    height = top + row * len(epochs) + 20
    raising = {(f.event_seq if f.event_seq is not None else f.event_offset): f for f in findings}
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="ownership timeline">']
    for ep, i in lane.items():
        y = top + i * row + row // 2
        parts.append(f'<text x="4" y="{y + 4}">epoch {ep}</text>')
        parts.append(
            f'<line x1="{left - 10}" y1="{y}" x2="{width - 10}" y2="{y}" stroke="#e0e0e0"/>'
        )
    # A dashed line where each epoch was first acquired: events of lower
    # epochs to its right are stale.
    first_seen: set[int] = set()
    for n, ev in enumerate(events):
        if ev.epoch in first_seen:
            continue
        first_seen.add(ev.epoch)
        if n == 0:
            continue
        x = left + n * step
        parts.append(
            f'<line x1="{x}" y1="{top - 6}" x2="{x}" y2="{height - 16}" '
            f'stroke="#9e9e9e" stroke-dasharray="3,3"/>'
        )
    for n, ev in enumerate(events):
        x = left + n * step
        y = top + lane[ev.epoch] * row + row // 2
        colour, letter = _TYPE_MARK.get(ev.type, ("#000", "?"))
        title = escape(
            f"pos {ev.position}: {ev.type} epoch {ev.epoch} by {ev.worker_id}"
            + (f" [{ev.effect_key}]" if ev.effect_key else "")
        )
        f = raising.get(ev.position)
        if f is not None:
            parts.append(
                f'<circle cx="{x}" cy="{y}" r="11" fill="none" stroke-width="3" '
                f'stroke="{_SEV_COLOUR[f.severity]}"/>'
            )
        parts.append(
            f'<g><title>{title}</title><circle cx="{x}" cy="{y}" r="8" '
            f'fill="{colour}"/><text x="{x - 3}" y="{y + 4}" fill="#fff">{letter}'
            f"</text></g>"
        )
        parts.append(f'<text x="{x - 6}" y="{height - 4}" fill="#555">{ev.position}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(replay: Replay, *, title: str = "fencewatch audit", partial: bool = False) -> str:
    health_view = replay.health()
    s = replay.summary(health_view)
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"
    ]
    out.append(
        f"<p class='summary'>{s['events']} events, {s['invalid']} invalid, {s['workflows']} "
        f"workflows; <b>{s['findings']} findings</b> "
        + escape(
            ", ".join(
                f"{s['by_severity'][sev.value]} {sev.value}"
                for sev in reversed(Severity)
                if sev.value in s["by_severity"]
            )
        )
        + "</p>"
    )
    out.append(
        "<p>Timelines: one lane per epoch, events in position order (seq, else arrival); "
        "A acquired, p progress, a attempted, C committed, x rejected, R released, "
        "V verified; a dashed line marks where an epoch first appears, a ring the event "
        "that raised a finding.</p>"
    )
    drawn = 0
    health = {h.finding_id: h.status for h in health_view}
    for wkey, group in groupby(replay.latest_findings(), key=lambda f: f.workflow_key):
        items = list(group)
        out.append(
            f"<h2>{escape(wkey)}</h2><table><tr><th>severity</th><th>kind</th>"
            "<th>at</th><th>what happened</th><th>action</th><th>status</th></tr>"
        )
        for f in items:
            at = f"seq {f.event_seq}" if f.event_seq is not None else f"offset {f.event_offset}"
            out.append(
                f"<tr><td class='nw'><span class='sev' "
                f"style='background:{_SEV_COLOUR[f.severity]}'>"
                f"{f.severity.value}</span></td><td class='nw'>{f.kind.value}</td>"
                f"<td class='nw'>{at}</td>"
                f"<td>{escape(describe(f))}</td><td>{escape(f.action)}</td>"
                f"<td class='nw'>{health[f.finding_id]}</td></tr>"
            )
        out.append("</table>")
        state = replay.states.get(wkey)
        if state is not None and drawn < MAX_TIMELINES:
            out.append(_timeline_svg(state.timeline(), items))
            drawn += 1
    if replay.invalid:
        out.append(
            "<h2>Invalid input</h2><table><tr><th>where</th><th>field</th><th>reason</th></tr>"
        )
        for inv in replay.invalid[:1000]:
            where = (
                f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"
            )
            out.append(
                f"<tr><td>{escape(where)}</td><td>{escape(inv.field or '')}</td>"
                f"<td>{escape(inv.reason)}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>\n")
    return "".join(out)
