"""The HTML report: one offline page for an operator (inline CSS and JS, no
network).

* A summary (events, workflows flagged and clean, findings by severity, how
  many are still open) and, when the report has them, the destinations.
* An overview of every workflow: flagged ones first (worst severity, then
  open findings), with counts by severity and open/cleared; clean ones counted
  and listed in a collapsible list.
* Per flagged workflow: its findings (severity, kind, position, what
  happened, confidence, health status, action) and an ownership timeline that
  fits the page: one lane per epoch, labelled with its workers and kept in
  view while the timeline scrolls; every event around a finding or an
  acquisition drawn in full, runs of ordinary events between them collapsed
  into one mark with a count (click to expand; zoom buttons), and every
  finding its own numbered mark above the event that raised it.

Bounds (what happens at them is said on the page): timelines are drawn for
the first :data:`MAX_TIMELINES` flagged workflows; a timeline draws at most
:data:`MAX_MARKS` events (runs past that budget keep their count but cannot be
expanded); the clean list names :data:`MAX_CLEAN_LISTED` workflows, the
destinations table :data:`MAX_DESTINATIONS_LISTED` sinks, the invalid table
:data:`MAX_INVALID_LISTED` records. The finding tables list every finding.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from html import escape
from itertools import groupby
from typing import Any

from streams.core.destinations import Verdict
from streams.core.findings import Evidence, Finding
from streams.core.health import CLEARED, Health
from streams.core.records import EventType, Severity
from streams.core.replay import Replay
from streams.core.whatif import ADDED, REMOVED, WhatIf
from streams.report.html_assets import CSS as _CSS
from streams.report.html_assets import JS as _JS
from streams.report.text import change_text, confidence_reason, describe

__all__ = [
    "FIT_PX",
    "MAX_CLEAN_LISTED",
    "MAX_DESTINATIONS_LISTED",
    "MAX_INVALID_LISTED",
    "MAX_MARKS",
    "MAX_TIMELINES",
    "WINDOW",
    "render_html",
]

#: Flagged workflows that get a timeline; the tables still list every finding.
MAX_TIMELINES = 200
#: Events drawn per timeline (visible plus expandable); past it a collapsed
#: run keeps its count and says the rest is not drawn.
MAX_MARKS = 2000
#: Width (px) a timeline's columns get in a 1400 px window: the marks of
#: positions with findings must fit in it (see ``_timeline``).
FIT_PX = 1000
#: Events drawn in full either side of a finding's raising event.
WINDOW = 3
#: Clean workflows named in the collapsible list (all are counted).
MAX_CLEAN_LISTED = 5000
#: Invalid records listed (all are counted).
MAX_INVALID_LISTED = 1000

_ORDER = (Severity.CRITICAL, Severity.INCIDENT, Severity.WARNING, Severity.DIAGNOSTIC)
_RANK = {s: i for i, s in enumerate(_ORDER)}  # 0 is the worst
_TYPES = frozenset(t.value for t in EventType)
_LEGEND = (
    ("lease_acquired", "acquired"),
    ("progress", "progress"),
    ("effect_attempted", "attempted"),
    ("effect_committed", "committed"),
    ("effect_rejected", "rejected"),
    ("outcome_verified", "verified"),
    ("lease_released", "released"),
)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _position(f: Finding) -> int:
    return f.event_seq if f.event_seq is not None else f.event_offset


def _at(f: Finding) -> str:
    return f"seq {f.event_seq}" if f.event_seq is not None else f"offset {f.event_offset}"


def _sev_counts(findings: Iterable[Finding]) -> Counter[Severity]:
    return Counter(f.severity for f in findings)


def _sev_cells(counts: Mapping[Severity, int]) -> str:
    cls = {
        Severity.CRITICAL: "cnt-crit",
        Severity.INCIDENT: "cnt-inc",
        Severity.WARNING: "cnt-warn",
        Severity.DIAGNOSTIC: "cnt-diag",
    }
    out = []
    for sev in _ORDER:
        n = counts.get(sev, 0)
        out.append(f"<td class='num {cls[sev] if n else 'zero'}'>{n}</td>")
    return "".join(out)


def _sev(sev: Severity) -> str:
    return f"<span class='sev {sev.value}'>{sev.value}</span>"


class _Workflow:
    """One flagged workflow: its findings in report order and their health."""

    __slots__ = ("anchor", "cleared", "counts", "findings", "key", "worst")

    def __init__(
        self, key: str, findings: list[Finding], health: Mapping[str, Health], anchor: str
    ) -> None:
        self.key = key
        self.findings = findings
        self.anchor = anchor
        self.counts = _sev_counts(findings)
        self.worst = min((f.severity for f in findings), key=_RANK.__getitem__)
        self.cleared = sum(1 for f in findings if health[f.finding_id].status == CLEARED)

    @property
    def open(self) -> int:
        return len(self.findings) - self.cleared


def render_html(
    replay: Replay,
    *,
    title: str = "fencewatch audit",
    partial: bool = False,
    what_if: WhatIf | None = None,
) -> str:
    """The page. ``partial``: a banner says the audit was interrupted;
    ``what_if`` (``--what-if-fenced``): a section with the findings that would
    change, next to the real ones (never instead of them)."""
    health_view = replay.health()
    health = {h.finding_id: h for h in health_view}
    s = replay.summary(health_view)
    findings = replay.latest_findings()
    flagged = [
        _Workflow(key, list(group), health, f"w{i}")
        for i, (key, group) in enumerate(groupby(findings, key=lambda f: f.workflow_key))
    ]
    # Worst first, then the most open findings, then the key (stable, readable).
    flagged.sort(key=lambda w: (_RANK[w.worst], -w.open, -len(w.findings), w.key))
    flagged_keys = {w.key for w in flagged}
    clean = sorted(k for k in replay.states if k not in flagged_keys)

    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{escape(title)}</h1>"
    ]
    out.append(
        f"<p class='sub'>Stale-owner findings per workflow, from "
        f"{_plural(s['records'], 'record')}. Positions are the events' <code>seq</code>"
        f" (else arrival: line or offset).</p>"
    )
    if partial:
        out.append(
            f"<div class='banner partial'>PARTIAL REPORT: the audit was interrupted after "
            f"{_plural(replay.records, 'record')}; findings and counts cover only what was "
            "read.</div>"
        )
    out.append(_summary_cards(s, len(flagged), len(clean)))
    out.append(_overview(flagged, clean, replay))
    out.append(_destinations(replay))
    if what_if is not None:
        out.append(_what_if(what_if, {w.key: w.anchor for w in flagged}))
    if flagged:
        out.append("<h2>Flagged workflows</h2>")
        out.append(_legend())
    for n, wf in enumerate(flagged):
        out.append(_workflow_section(replay, wf, health, draw=n < MAX_TIMELINES))
    if len(flagged) > MAX_TIMELINES:
        out.append(
            f"<p class='note'>Timelines are drawn for the first {MAX_TIMELINES} flagged "
            f"workflows; the other {len(flagged) - MAX_TIMELINES:,} list their findings only.</p>"
        )
    out.append(_invalid(replay))
    out.append(
        "<footer>fencewatch audit report: one offline file (no network). A finding is "
        "cleared only when the stale worker is fenced and the outcome verified by the "
        "current owner (SPEC §4); an audit still lists it.</footer>"
    )
    out.append(f"</main><script>{_JS}</script></body></html>\n")
    return "".join(out)


def _summary_cards(s: Mapping[str, Any], n_flagged: int, n_clean: int) -> str:
    by_sev = s["by_severity"]
    sev_line = " · ".join(
        f"{by_sev[sev.value]} {sev.value}" for sev in _ORDER if sev.value in by_sev
    )
    worst = s["worst_severity"]
    worst_html = _sev(Severity(worst)) if worst else "<span class='muted'>none</span>"
    extra = []
    if s.get("redeliveries_dropped"):
        extra.append(f"{s['redeliveries_dropped']:,} redeliveries dropped")
    if s.get("evidence_evicted"):
        extra.append(f"{s['evidence_evicted']:,} evicted (per-key bound)")
    return (
        "<section class='cards'>"
        f"<div class='card'><div class='k'>Findings</div><div class='v'>{s['findings']:,}</div>"
        f"<div class='d'>{s.get('findings_open', 0):,} open · "
        f"{s.get('findings_cleared', 0):,} cleared</div></div>"
        f"<div class='card'><div class='k'>Worst severity</div><div class='v'>{worst_html}</div>"
        f"<div class='d'>{escape(sev_line) or 'no findings'}</div></div>"
        f"<div class='card'><div class='k'>Workflows</div><div class='v'>{s['workflows']:,}</div>"
        f"<div class='d'>{n_flagged:,} flagged · {n_clean:,} clean</div></div>"
        f"<div class='card'><div class='k'>Events</div><div class='v'>{s['events']:,}</div>"
        f"<div class='d'>{s['invalid']:,} invalid"
        + "".join(f" · {escape(x)}" for x in extra)
        + "</div></div></section>"
    )


#: Destinations listed (all are in --format json).
MAX_DESTINATIONS_LISTED = 200
_VERDICT_TIP = {
    Verdict.IGNORES_FENCE: "committed an effect for a displaced owner: it ignores the fence",
    Verdict.ENFORCES_FENCE: "refused displaced owners and committed none of theirs",
    Verdict.UNPROVEN: "no displaced owner reached it: nothing shows whether it fences",
}


def _destinations(replay: Replay) -> str:
    dests = replay.destinations()
    if not dests:
        return ""
    out = [
        "<h2>Destinations</h2><p class='muted'>Does each sink refuse a displaced owner? "
        "A lease service can be healthy while a destination ignores the ownership token."
        "</p><div class='panel'><table><tr><th>sink</th>"
        "<th class='num'>stale committed</th><th class='num'>stale rejected</th>"
        "<th class='num'>current committed</th><th>verdict</th></tr>"
    ]
    for d in dests[:MAX_DESTINATIONS_LISTED]:
        v = d.verdict
        out.append(
            f"<tr><td class='key'>{escape(d.sink)}</td>"
            f"<td class='num'>{d.stale_committed:,}</td>"
            f"<td class='num'>{d.stale_rejected:,}</td>"
            f"<td class='num'>{d.current_committed:,}</td>"
            f"<td><span class='pill {v.value}' title='{escape(_VERDICT_TIP[v], quote=True)}'>"
            f"{v.value.replace('_', ' ')}</span></td></tr>"
        )
    out.append("</table></div>")
    if len(dests) > MAX_DESTINATIONS_LISTED:
        out.append(
            f"<p class='note'>The first {MAX_DESTINATIONS_LISTED} of {len(dests):,} sinks "
            "(worst first); --format json lists every one.</p>"
        )
    return "".join(out)


def _what_if(w: WhatIf, anchors: Mapping[str, str]) -> str:
    sinks = ", ".join(w.fenced_sinks)
    alt = w.findings()
    worst = w.replay.worst_severity()
    out = [
        f"<h2>What if {escape(sinks)} had enforced the fence</h2><p class='muted'>"
        f"The same evidence replayed with {_plural(w.converted, 'stale commit')} at "
        f"{escape(sinks)} refused instead of committed: it would leave "
        f"{_plural(len(alt), 'finding')}"
        + (f", worst {worst.value}" if worst is not None else "")
        + ". The real findings above and below are unchanged.</p>"
    ]
    for sink in w.unseen_sinks:
        out.append(f"<p class='note'>No effect event names sink {escape(repr(sink))}.</p>")
    if not w.changes:
        out.append("<p>No finding would change.</p>")
        return "".join(out)
    out.append(
        "<div class='panel'><table><tr><th>workflow</th><th>finding</th><th class='nw'>at</th>"
        "<th>change</th><th>what would differ</th></tr>"
    )
    for c in w.changes:
        f = c.finding
        anchor = anchors.get(f.workflow_key)
        key = escape(f.workflow_key)
        key_html = f"<a href='#{anchor}'>{key}</a>" if anchor else key
        pill = "cleared" if c.change == REMOVED else "open" if c.change == ADDED else "medium"
        out.append(
            f"<tr><td class='key'>{key_html}</td><td class='nw'>{_sev(f.severity)} "
            f"{f.kind.value}</td><td class='nw'>{_at(f)}</td>"
            f"<td><span class='pill {pill}'>{c.change}</span></td>"
            f"<td>{escape(change_text(c))}</td></tr>"
        )
    out.append("</table></div>")
    return "".join(out)


def _overview(flagged: list[_Workflow], clean: list[str], replay: Replay) -> str:
    out = ["<h2>Workflows</h2>"]
    if flagged:
        out.append(
            "<div class='panel'><table><tr><th>workflow</th><th>worst</th>"
            "<th class='num'>critical</th><th class='num'>incident</th>"
            "<th class='num'>warning</th><th class='num'>diagnostic</th>"
            "<th class='num'>open</th><th class='num'>cleared</th>"
            "<th class='num'>events</th><th class='num'>epochs</th></tr>"
        )
        for wf in flagged:
            state = replay.states.get(wf.key)
            n_events = state.n_events if state is not None else 0
            epochs = len({e.epoch for e in state.timeline()}) if state is not None else 0
            out.append(
                f"<tr><td class='key'><a href='#{wf.anchor}'>{escape(wf.key)}</a></td>"
                f"<td>{_sev(wf.worst)}</td>{_sev_cells(wf.counts)}"
                f"<td class='num'>{wf.open}</td><td class='num'>{wf.cleared}</td>"
                f"<td class='num'>{n_events:,}</td><td class='num'>{epochs}</td></tr>"
            )
        out.append("</table></div>")
    else:
        out.append("<p>No workflow has a finding.</p>")
    if clean:
        listed = clean[:MAX_CLEAN_LISTED]
        more = len(clean) - len(listed)
        out.append(
            f"<details class='clean'><summary>{_plural(len(clean), 'clean workflow')} "
            "(no finding): show</summary><ul class='cleanlist'>"
            + "".join(f"<li>{escape(k)}</li>" for k in listed)
            + "</ul>"
            + (f"<p class='note'>… and {more:,} more (not listed).</p>" if more else "")
            + "</details>"
        )
    return "".join(out)


def _legend() -> str:
    marks = "".join(f"<span><i class='ev t-{t}'></i>{label}</span>" for t, label in _LEGEND)
    return (
        "<div class='legend'>"
        + marks
        + "<span><a class='fmark critical' style='display:inline-block'>1</a> finding "
        "(numbered as in its table; outlined when cleared)</span>"
        "<span><span class='sum' style='position:relative;display:inline-block;width:30px;"
        "height:18px'><span class='n' style='transform:translate(-50%,0)'>40</span></span>"
        "collapsed run (click to expand)</span>"
        "<span>┊ where an epoch first appears</span></div>"
    )


def _workflow_section(
    replay: Replay, wf: _Workflow, health: Mapping[str, Health], *, draw: bool
) -> str:
    out = [
        f"<section class='wf' id='{wf.anchor}'><div class='wf-head'><h3>{escape(wf.key)}</h3>"
        f"{_sev(wf.worst)}<span class='muted'>{_plural(len(wf.findings), 'finding')} · "
        f"{wf.open} open · {wf.cleared} cleared</span></div>"
    ]
    # The timeline first: where things went wrong at a glance; the table
    # below says what each numbered mark is and what to do.
    state = replay.states.get(wf.key)
    if draw and state is not None:
        out.append(_timeline(state.timeline(), wf.findings, health))
    out.append(
        "<div class='tscroll'><table class='findings'><tr><th class='nw'>#</th>"
        "<th>severity</th><th>kind</th>"
        "<th class='nw'>at</th><th>what happened</th><th>confidence</th><th>status</th></tr>"
    )
    for num, f in enumerate(wf.findings, 1):
        h = health[f.finding_id]
        conf = f.confidence.value
        conf_html = (
            f"<span class='pill {conf}' title='{escape(confidence_reason(f), quote=True)}'>"
            f"{conf}</span>"
        )
        out.append(
            f"<tr id='f-{f.finding_id}'><td class='nw muted'>{num}</td><td>{_sev(f.severity)}</td>"
            f"<td class='nw'>{f.kind.value}</td><td class='nw'>{_at(f)}</td>"
            f"<td class='what'>{escape(describe(f))}<div class='action'>{escape(f.action)}"
            "</div></td>"
            f"<td>{conf_html}</td><td><span class='pill {h.status}'>{h.status}</span></td></tr>"
        )
    out.append("</table></div></section>")
    return "".join(out)


def _title(e: Evidence) -> str:
    return escape(
        f"{e.position}: {e.type} · epoch {e.epoch} · {e.worker_id}"
        + (f" · {e.effect_key}" if e.effect_key else ""),
        quote=True,
    )


def _timeline(events: list[Evidence], findings: list[Finding], health: Mapping[str, Health]) -> str:
    if not events:
        return "<p class='note'>No evidence retained for this workflow.</p>"
    n = len(events)
    by_pos: dict[int, list[int]] = {}
    for i, e in enumerate(events):
        by_pos.setdefault(e.position, []).append(i)

    # Where each finding sits: its raising event (by position and type).
    raising: dict[int, list[tuple[int, Finding]]] = {}
    unplaced: list[tuple[int, Finding]] = []
    for num, f in enumerate(findings, 1):
        idxs = by_pos.get(_position(f), [])
        idx = next((i for i in idxs if events[i].type == f.event_type), None)
        if idx is None and idxs:
            idx = idxs[0]
        if idx is None:
            unplaced.append((num, f))
        else:
            raising.setdefault(idx, []).append((num, f))
    hits = len(raising) + (1 if unplaced else 0)
    # Draw the windows around findings when the marks then fit the width
    # (a column with findings keeps 22 px, a collapsed run 22 px, the others
    # shrink); else "dense": only the raising events and acquisitions in full,
    # smaller marks (15 px). When even that does not fit, the timeline
    # scrolls inside itself (never the page) and says so.
    keep, acq = _kept(events, raising, by_pos, dense=False)
    dense = 22 * (hits + _runs(keep, n)) > FIT_PX
    if dense:
        keep, acq = _kept(events, raising, by_pos, dense=True)
    overflow = dense and 15 * hits > FIT_PX
    seen = {e.epoch for e in events}
    epochs = sorted(seen, reverse=True)
    lane = {ep: k for k, ep in enumerate(epochs)}
    workers: dict[int, list[str]] = {}
    for e in events:
        ws = workers.setdefault(e.epoch, [])
        if e.worker_id not in ws and len(ws) < 4:
            ws.append(e.worker_id)

    stack = max([len(v) for v in raising.values()] + [len(unplaced), 1])
    fh = 10 + 18 * stack
    budget = MAX_MARKS - len(keep)

    def col(i: int) -> str:
        e = events[i]
        cls = "col"
        if i in acq:
            cls += " acq"
        marks = raising.get(i, [])
        badges = pos = ring = ""
        style = f"top:calc(var(--fh) + {lane[e.epoch]} * var(--lh))"
        if marks:
            cls += " hit"
            worst = min((f.severity for _, f in marks), key=_RANK.__getitem__)
            ring = " ring"
            style += f";--ring:var(--{_VAR[worst]})"
            badges = "".join(_badge(num, f, health) for num, f in marks)
        if marks or i in acq:
            pos = f"<span class='pos'>{e.position}</span>"
        t = e.type if e.type in _TYPES else "other"
        return (
            f"<div class='{cls}'><div class='fc'>{badges}</div>"
            f"<i class='ev t-{t}{ring}' style='{style}' title='{_title(e)}'></i>{pos}</div>"
        )

    cols: list[str] = []
    if unplaced:
        cols.append(
            "<div class='col hit' title='raising event no longer retained (per-key bound)'>"
            "<div class='fc'>"
            + "".join(_badge(num, f, health) for num, f in unplaced)
            + "</div><span class='pos'>…</span></div>"
        )
    capped = False
    i = 0
    while i < n:
        if i in keep:
            cols.append(col(i))
            i += 1
            continue
        j = i
        while j < n and j not in keep:
            j += 1
        if j - i == 1:
            cols.append(col(i))
        else:
            expandable = j - i <= budget
            if expandable:
                budget -= j - i
            else:
                capped = True
            cols.append(_run(events, i, j, lane, expandable, col))
        i = j

    note = (
        f"<p class='note'>This workflow retains {n:,} events; {MAX_MARKS:,} are drawn at most. "
        "Runs with a dashed count are not drawn (their count is exact).</p>"
        if capped
        else ""
    )
    # Few columns draw wider (easier to read); many shrink to fit the width.
    cw = max(26, min(44, 1000 // len(cols)))
    mode = " dense free" if overflow else " dense" if dense else ""
    if overflow:
        note += (
            f"<p class='note'>{hits} positions with findings are too many to fit the width: "
            "scroll the timeline sideways, or use the table.</p>"
        )
    labels = ["<div class='lab-f'>findings</div>"]
    for ep in epochs:
        ws = workers[ep]
        who = ", ".join(ws) + (" …" if len(ws) == 4 else "")
        labels.append(
            f"<div class='lane-label' title='{escape(f'epoch {ep}: {who}', quote=True)}'>"
            f"<b>epoch {ep}</b><small>{escape(who)}</small></div>"
        )
    labels.append("<div class='lab-p'>position</div>")
    lanes = "".join(
        f"<div class='lane{' alt' if k % 2 else ''}' "
        f"style='top:calc(var(--fh) + {k} * var(--lh))'></div>"
        for k in range(len(epochs))
    )
    return (
        f"<div class='tl{mode}' data-cw='{cw}' "
        f"style='--fh:{fh}px;--lanes:{len(epochs)};--cw:{cw}px'>"
        f"<div class='tl-tools'><span>Ownership timeline · {_plural(n, 'event')} · "
        f"{_plural(len(epochs), 'epoch')}</span><span class='sp'></span>"
        "<button data-act='all' title='draw every event'>expand all</button>"
        "<button data-act='fit' title='collapse and fit the width'>fit</button>"
        "<button data-act='out' title='zoom out'>&minus;</button>"
        "<button data-act='in' title='zoom in'>+</button></div>"
        f"<div class='tl-scroll'><div class='tl-body'><div class='labels'>{''.join(labels)}"
        f"</div><div class='cols'>{lanes}{''.join(cols)}</div></div></div>{note}</div>"
    )


def _kept(
    events: list[Evidence],
    raising: Mapping[int, list[tuple[int, Finding]]],
    by_pos: Mapping[int, list[int]],
    *,
    dense: bool,
) -> tuple[set[int], set[int]]:
    """The events drawn in full (the rest collapse into runs), and where each
    epoch first appears (its acquisition, or its first act)."""
    n = len(events)
    window, around = (0, 0) if dense else (WINDOW, 1)
    keep: set[int] = {0, n - 1}
    for idx, marks in raising.items():
        keep.update(range(max(0, idx - window), min(n, idx + window + 1)))
        if not dense:
            for _, f in marks:
                for ev in f.evidence:
                    keep.update(by_pos.get(ev.position, ()))
    acq: set[int] = set()
    seen: set[int] = set()
    for i, e in enumerate(events):
        if e.epoch not in seen:
            seen.add(e.epoch)
            acq.add(i)
            keep.update(range(max(0, i - around), min(n, i + around + 1)))
    return keep, acq


def _runs(keep: set[int], n: int) -> int:
    """How many collapsed runs (two or more events not kept) there are."""
    runs = 0
    length = 0
    for i in range(n + 1):
        if i < n and i not in keep:
            length += 1
            continue
        runs += length > 1
        length = 0
    return runs


_VAR = {
    Severity.CRITICAL: "crit",
    Severity.INCIDENT: "inc",
    Severity.WARNING: "warn",
    Severity.DIAGNOSTIC: "diag",
}


def _badge(num: int, f: Finding, health: Mapping[str, Health]) -> str:
    status = health[f.finding_id].status
    tip = escape(
        f"#{num} {f.severity.value} {f.kind.value} at {_at(f)} ({status}): {describe(f)}",
        quote=True,
    )
    cleared = " cleared" if status == CLEARED else ""
    return (
        f"<a class='fmark {f.severity.value}{cleared}' href='#f-{f.finding_id}' "
        f"data-finding='{f.finding_id}' title='{tip}'>{num}</a>"
    )


def _run(
    events: list[Evidence],
    start: int,
    end: int,
    lane: Mapping[int, int],
    expandable: bool,
    col: Any,
) -> str:
    """A collapsed run of events ``start..end-1``: one column with a count per
    lane; its events drawn hidden (shown on click) while the budget lasts."""
    per_lane: Counter[int] = Counter(events[k].epoch for k in range(start, end))
    types = Counter(events[k].type for k in range(start, end))
    span = f"positions {events[start].position}-{events[end - 1].position}"
    what = ", ".join(f"{c} {t}" for t, c in types.most_common())
    counts = "".join(
        f"<span class='n' style='top:calc(var(--fh) + {lane[ep]} * var(--lh))'>{c:,}</span>"
        for ep, c in per_lane.items()
    )
    if not expandable:
        tip = escape(f"{end - start} events, {span}: {what} (not drawn: cap reached)", quote=True)
        return f"<div class='col sum capped' title='{tip}'>{counts}</div>"
    tip = escape(f"{end - start} events, {span}: {what}. Click to expand.", quote=True)
    detail = "".join(col(k) for k in range(start, end))
    return (
        f"<div class='run' data-x='1'><button class='col sum' data-act='run' title='{tip}'>"
        f"{counts}</button><div class='det'>{detail}</div></div>"
    )


def _invalid(replay: Replay) -> str:
    if not replay.invalid_count:
        return ""
    out = [
        f"<h2>Invalid input</h2><p class='muted'>{_plural(replay.invalid_count, 'record')} "
        "skipped.</p><div class='panel'><table><tr><th>where</th><th>field</th>"
        "<th>reason</th></tr>"
    ]
    for inv in replay.invalid[:MAX_INVALID_LISTED]:
        where = f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"
        out.append(
            f"<tr><td class='key'>{escape(where)}</td><td>{escape(inv.field or '')}</td>"
            f"<td>{escape(inv.reason)}</td></tr>"
        )
    out.append("</table></div>")
    if replay.invalid_count > MAX_INVALID_LISTED:
        out.append(
            f"<p class='note'>The first {MAX_INVALID_LISTED:,} are listed; --format json lists "
            "the first 10,000.</p>"
        )
    return "".join(out)
