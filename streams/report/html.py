"""The HTML report: one offline page for an operator (inline CSS and JS, no
network), light at any input size.

* A summary (events, workflows flagged and clean, findings by severity, how
  many are still open) and, when the report has them, the destinations.
* An overview of every flagged workflow (worst severity, then open
  findings), with counts by severity and open/cleared; clean ones counted
  and listed in a collapsible list.
* The most informative flagged workflows (:func:`rank_for_timelines`: most
  findings x epochs) each get a section: their findings (severity, kind,
  position, what happened, confidence, health status, action) and an
  ownership timeline that fits the page (:func:`render_timeline`).
* The findings of the other flagged workflows in one table.

Size: the page stays under about :data:`PAGE_BYTES` whatever the input. The
overview and the other workflows' findings are embedded once as JSON and
drawn a page of rows at a time by the page's script (with a filter by
workflow); sections are drawn while :data:`SECTIONS_BYTES` lasts (at most
:data:`MAX_TIMELINES`), the embedded data while :data:`DATA_BYTES` lasts, and
the clean list, destinations and invalid records are capped too. Whatever is
left out is counted on the page, which points to ``--format json`` (it lists
everything). A timeline draws at most :data:`MAX_MARKS` events (runs past
that budget keep their count but cannot be expanded).

Narrow windows (940 px or less): every table stacks into one card per row,
each cell labelled, instead of scrolling sideways.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from html import escape
from itertools import compress, groupby, pairwise
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from streams.core.destinations import Verdict
from streams.core.detector import epoch_starts
from streams.core.findings import Evidence, Finding
from streams.core.health import CLEARED, Health
from streams.core.records import EventType, Severity
from streams.core.replay import Replay
from streams.core.whatif import ADDED, REMOVED, WhatIf

if TYPE_CHECKING:
    from streams.core.detector import KeyState
from streams.report.coverage import INTERRUPTED, Coverage
from streams.report.html_assets import CSS as _CSS
from streams.report.html_assets import JS as _JS
from streams.report.text import VALUE, change_text, confidence_reason, describe

__all__ = [
    "DATA_BYTES",
    "FIT_PX",
    "MAX_CLEAN_LISTED",
    "MAX_DESTINATIONS_LISTED",
    "MAX_INVALID_LISTED",
    "MAX_MARKS",
    "MAX_TIMELINES",
    "MAX_WHAT_IF_LISTED",
    "PAGE_BYTES",
    "PAGE_ROWS",
    "SECTIONS_BYTES",
    "SECTION_ROWS",
    "WINDOW",
    "Events",
    "LazyTimeline",
    "rank_for_timelines",
    "render_html",
    "render_timeline",
    "timeline_legend",
]

#: The page's size target (bytes, UTF-8): the budgets below add up to less.
PAGE_BYTES = 5_000_000
#: Workflow sections (timeline and findings table) drawn, in rank order,
#: while their HTML fits in this (one that does not is skipped for the next);
#: the first is always drawn.
SECTIONS_BYTES = 1_500_000
#: The embedded JSON behind the paged tables (overview, other findings).
DATA_BYTES = 1_700_000
#: Below this much left of SECTIONS_BYTES, no section is tried any more.
_SMALLEST_SECTION = 4_000
#: Flagged workflows that get a section with a timeline, at most.
MAX_TIMELINES = 60
#: Findings listed in a section's own table; the rest join the paged table.
SECTION_ROWS = 100
#: Rows per page of a paged table.
PAGE_ROWS = 50
#: Events drawn per timeline (visible plus expandable); past it a collapsed
#: run keeps its count and says the rest is not drawn.
MAX_MARKS = 1000
#: Width (px) a timeline's columns get in a 1400 px window: the marks of
#: positions with findings must fit in it (see ``render_timeline``).
FIT_PX = 1000
#: Events drawn in full either side of a finding's raising event.
WINDOW = 3
#: Clean workflows named in the collapsible list (all are counted), and the
#: bytes their names may take.
MAX_CLEAN_LISTED = 5000
_CLEAN_BYTES = 300_000
#: Invalid records listed (all are counted), and the bytes their rows may take.
MAX_INVALID_LISTED = 1000
_INVALID_BYTES = 300_000

_ORDER = (Severity.CRITICAL, Severity.INCIDENT, Severity.WARNING, Severity.DIAGNOSTIC)
_RANK = {s: i for i, s in enumerate(_ORDER)}  # 0 is the worst
_CRITICAL, _INCIDENT, _WARNING, _DIAGNOSTIC = _ORDER  # the overview's count columns
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


def _sev(sev: Severity) -> str:
    return f"<span class='sev {sev.value}'>{sev.value}</span>"


def _td(label: str, body: str, cls: str = "") -> str:
    """A cell that knows its column's name (the card layout shows it)."""
    c = f" class='{cls}'" if cls else ""
    return f"<td{c} data-l='{label}'>{body}</td>"


class _Workflow:
    """One flagged workflow: its findings in report order, their health, and
    its evidence's size (events, epochs)."""

    __slots__ = ("anchor", "cleared", "counts", "epochs", "events", "findings", "key", "worst")

    def __init__(
        self,
        key: str,
        findings: list[Finding],
        health: Mapping[str, Health],
        replay: Replay,
    ) -> None:
        self.key = key
        self.findings = findings
        self.anchor: str | None = None  # set when the workflow gets a section
        # One pass over the findings (a report builds one of these per
        # flagged workflow, thousands on a large audit): a Counter, a min()
        # and a sum() over generators were three.
        counts: dict[Severity, int] = {}
        rank = len(_ORDER)
        cleared = 0
        for f in findings:
            sev = f.severity
            counts[sev] = counts.get(sev, 0) + 1
            r = _RANK[sev]
            if r < rank:
                rank = r
            if health[f.finding_id].status == CLEARED:
                cleared += 1
        self.counts = counts
        self.worst = _ORDER[rank]
        self.cleared = cleared
        state = replay.states.get(key)
        self.events = state.n_events if state is not None else 0
        self.epochs = state.epoch_count() if state is not None else 0

    @property
    def open(self) -> int:
        return len(self.findings) - self.cleared


def rank_for_timelines(findings: int, epochs: int, worst: Severity, key: str) -> tuple[Any, ...]:
    """The order in which flagged workflows get a timeline: the most findings
    x epochs first (a long tangle of takeovers tells more than one more
    single takeover), then the worst severity, then the key."""
    return (-findings * max(1, epochs), _RANK[worst], key)


def render_html(
    replay: Replay,
    *,
    title: str = "fencewatch audit",
    partial: bool = False,
    what_if: WhatIf | None = None,
    coverage: Coverage | None = None,
) -> str:
    """The page. ``partial``: a banner says the audit was interrupted;
    ``what_if`` (``--what-if-fenced``): a section with the findings that would
    change, next to the real ones (never instead of them); ``coverage``: why
    a partial read stopped and where each partition got to, and the
    partitions whose early records were deleted (a banner, and a note on the
    confidence of the findings on their keys)."""
    coverage = coverage or Coverage.of(partial)
    health_view = replay.health()
    health = {h.finding_id: h for h in health_view}
    s = replay.summary(health_view)
    findings = replay.latest_findings()
    flagged = [
        _Workflow(key, list(group), health, replay)
        for key, group in groupby(findings, key=lambda f: f.workflow_key)
    ]
    # Sections: the most informative workflows, while the budget lasts.
    by_info = sorted(
        flagged, key=lambda w: rank_for_timelines(len(w.findings), w.epochs, w.worst, w.key)
    )
    sections: list[str] = []
    used = 0
    for wf in by_info:
        if len(sections) == MAX_TIMELINES or SECTIONS_BYTES - used < _SMALLEST_SECTION:
            break
        wf.anchor = f"w{len(sections)}"
        html = _workflow_section(replay, wf, health, coverage)
        if sections and used + len(html) > SECTIONS_BYTES:
            wf.anchor = None
            continue
        sections.append(html)
        used += len(html)
    drawn = [w for w in by_info if w.anchor is not None]
    # The overview: worst first, then the most open findings, then the key.
    flagged.sort(key=lambda w: (_RANK[w.worst], -w.open, -len(w.findings), w.key))
    flagged_keys = {w.key for w in flagged}
    clean = sorted(replay.states.keys() - flagged_keys)
    data, left_out = _data(flagged, health, coverage)

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
    if coverage is not None:
        out.append(_coverage_banners(replay, coverage))
    out.append(_summary_cards(s, len(flagged), len(clean)))
    out.append(_overview(flagged, clean))
    out.append(_destinations(replay))
    if what_if is not None:
        out.append(_what_if(what_if, {w.key: w.anchor for w in flagged if w.anchor}))
    if drawn:
        out.append("<h2>Flagged workflows</h2>")
        out.append(
            f"<p class='muted'>A timeline for {_plural(len(drawn), 'workflow')} of "
            f"{len(flagged):,}: the most informative, ranked by findings &times; epochs "
            "(then worst severity), as many as the page's size budget holds."
            + (
                f" The findings of the other {len(flagged) - len(drawn):,} are in the table "
                "below; pick one in the overview to see them."
                if len(flagged) > len(drawn)
                else ""
            )
            + "</p>"
        )
        out.append(timeline_legend())
        out.extend(sections)
    if len(flagged) > len(drawn) or data["f"]:
        out.append(_others(len(flagged) - len(drawn)))
    if left_out:
        out.append(f"<p class='note left-out'>{escape(left_out)}</p>")
    out.append(_invalid(replay))
    out.append(
        "<footer>fencewatch audit report: one offline file (no network). A finding is "
        "cleared only when the stale worker is fenced and the outcome verified by the "
        "current owner (SPEC §4); an audit still lists it.</footer>"
    )
    blob = orjson.dumps(data).replace(b"</", b"<\\/").decode()
    out.append(
        f"</main><script type='application/json' id='fw-data'>{blob}</script>"
        f"<script>{_JS}</script></body></html>\n"
    )
    return "".join(out)


def _coverage_banners(replay: Replay, c: Coverage) -> str:
    out = []
    if c.partial is not None:
        why = (
            "the audit was interrupted"
            if c.partial == INTERRUPTED
            else f"the read stopped early ({c.partial})"
        )
        resume = c.resume_arg()
        where = ""
        if resume is not None and c.next_offsets:
            nexts = ", ".join(f"{p}: {o:,}" for p, o in sorted(c.next_offsets.items()))
            where = (
                f"<div class='d'>Next offset per partition: {escape(nexts)}. Resume with "
                f"<code>--from-offset {escape(resume)}</code>.</div>"
            )
        out.append(
            f"<div class='banner partial'>PARTIAL REPORT: {escape(why)} after "
            f"{_plural(replay.records, 'record')}; findings and counts cover only what was "
            f"read.{where}</div>"
        )
    if c.missing:
        items = "".join(f"<li>{escape(m.text())}</li>" for m in c.missing)
        out.append(
            f"<div class='banner missing'>MISSING HISTORY: "
            f"{_plural(c.missing_records, 'record')} deleted before the audit (retention or "
            "delete_records). Findings on keys of these partitions may lack earlier evidence; "
            f"their confidence says so.<ul>{items}</ul></div>"
        )
    return "".join(out)


def _summary_cards(s: Mapping[str, Any], n_flagged: int, n_clean: int) -> str:
    by_sev = s["by_severity"]
    sev_line = " · ".join(
        f"{by_sev[sev.value]:,} {sev.value}" for sev in _ORDER if sev.value in by_sev
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


def _data(
    flagged: list[_Workflow], health: Mapping[str, Health], coverage: Coverage | None
) -> tuple[dict[str, Any], str]:
    """The JSON behind the paged tables, within :data:`DATA_BYTES`, and a
    sentence on what it leaves out ("" when nothing).

    ``wf``: one row per flagged workflow, overview order: key, worst (index
    into ``sev``), counts by severity, open, cleared, events, epochs, anchor
    of its section ("" when none). ``f``: the findings of workflows without
    a section (and those past a section's :data:`SECTION_ROWS`): workflow
    row, number, severity, kind, at, what happened, action, confidence,
    its reason, status, note ("" or the missing-history note); long repeated
    strings are indexes into ``s``."""
    strings: dict[str, int] = {}
    # A string's index in ``s``, the next one when new: one C call a field
    # (the report makes three or four per listed finding).
    index = strings.setdefault

    budget = DATA_BYTES
    wf_rows: list[Any] = []
    for wf in flagged:
        c = wf.counts
        row = [
            wf.key,
            _RANK[wf.worst],
            c.get(_CRITICAL, 0),
            c.get(_INCIDENT, 0),
            c.get(_WARNING, 0),
            c.get(_DIAGNOSTIC, 0),
            wf.open,
            wf.cleared,
            wf.events,
            wf.epochs,
            wf.anchor or "",
        ]
        budget -= len(wf.key) + 40
        if budget < 0:
            break
        wf_rows.append(row)
    rows_out = len(flagged) - len(wf_rows)
    f_rows: list[Any] = []
    f_out = 0
    for i, wf in enumerate(flagged):
        first = SECTION_ROWS if wf.anchor else 0
        for num, f in enumerate(wf.findings[first:], first + 1):
            if i >= len(wf_rows) or budget < 0:
                f_out += 1
                continue
            what = describe(f)
            note = coverage.history_note(f) if coverage is not None else None
            f_rows.append(
                [
                    i,
                    num,
                    _RANK[f.severity],
                    index(VALUE[f.kind], len(strings)),
                    _at(f),
                    what,
                    index(f.action, len(strings)),
                    VALUE[f.confidence],
                    index(confidence_reason(f), len(strings)),
                    health[f.finding_id].status,
                    index(note, len(strings)) if note else -1,
                ]
            )
            budget -= len(what) + 60
    left = []
    if rows_out:
        left.append(f"{rows_out:,} flagged workflows are not in the overview")
    if f_out:
        left.append(f"{f_out:,} findings are not listed")
    left_out = (
        "To keep this page light, " + " and ".join(left) + "; --format json lists every one."
        if left
        else ""
    )
    data = {
        "sev": [s.value for s in _ORDER],
        "wf": wf_rows,
        "f": f_rows,
        "s": list(strings),
        "rows": PAGE_ROWS,
        "wfOut": rows_out,
    }
    return data, left_out


#: Destinations listed (all are in --format json).
MAX_DESTINATIONS_LISTED = 200
#: --what-if-fenced changes listed (all are in --format json).
MAX_WHAT_IF_LISTED = 300
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
        "</p><div class='panel'><table class='cardable'><tr><th>sink</th>"
        "<th class='num'>stale committed</th><th class='num'>stale rejected</th>"
        "<th class='num'>current committed</th><th>verdict</th></tr>"
    ]
    for d in dests[:MAX_DESTINATIONS_LISTED]:
        v = d.verdict
        out.append(
            f"<tr>{_td('sink', escape(d.sink), 'key')}"
            f"{_td('stale committed', f'{d.stale_committed:,}', 'num')}"
            f"{_td('stale rejected', f'{d.stale_rejected:,}', 'num')}"
            f"{_td('current committed', f'{d.current_committed:,}', 'num')}"
            f"<td data-l='verdict'><span class='pill {v.value}' "
            f"title='{escape(_VERDICT_TIP[v], quote=True)}'>"
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
        "<div class='panel'><table class='cardable'><tr><th>workflow</th><th>finding</th>"
        "<th class='nw'>at</th>"
        "<th>change</th><th>what would differ</th></tr>"
    )
    for c in w.changes[:MAX_WHAT_IF_LISTED]:
        f = c.finding
        anchor = anchors.get(f.workflow_key)
        key = escape(f.workflow_key)
        key_html = f"<a href='#{anchor}'>{key}</a>" if anchor else key
        pill = "cleared" if c.change == REMOVED else "open" if c.change == ADDED else "medium"
        out.append(
            f"<tr>{_td('workflow', key_html, 'key')}"
            f"{_td('finding', f'{_sev(f.severity)} {f.kind.value}', 'nw')}"
            f"{_td('at', _at(f), 'nw')}"
            + _td("change", f"<span class='pill {pill}'>{c.change}</span>")
            + f"{_td('what would differ', escape(change_text(c)))}</tr>"
        )
    out.append("</table></div>")
    if len(w.changes) > MAX_WHAT_IF_LISTED:
        out.append(
            f"<p class='note'>The first {MAX_WHAT_IF_LISTED} of {len(w.changes):,} changes; "
            "--format json lists every one.</p>"
        )
    return "".join(out)


def _overview(flagged: list[_Workflow], clean: list[str]) -> str:
    """The flagged workflows' table, drawn from the embedded data a page at a
    time (``fw-data``'s ``wf``), and the clean ones' collapsible list."""
    out = ["<h2>Workflows</h2>"]
    if flagged:
        out.append(
            "<div class='panel paged' data-table='wf'><div class='pager-tools'>"
            "<input type='search' placeholder='filter by workflow key' aria-label='filter'>"
            "<span class='sp'></span><span class='pg'></span></div>"
            "<table class='cardable'><thead><tr><th>workflow</th><th>worst</th>"
            "<th class='num'>critical</th><th class='num'>incident</th>"
            "<th class='num'>warning</th><th class='num'>diagnostic</th>"
            "<th class='num'>open</th><th class='num'>cleared</th>"
            "<th class='num'>events</th><th class='num'>epochs</th></tr></thead>"
            "<tbody></tbody></table></div>"
        )
    else:
        out.append("<p>No workflow has a finding.</p>")
    if clean:
        keys = _escape_each(clean[:MAX_CLEAN_LISTED])
        # As many as fit in _CLEAN_BYTES with their <li></li> (9 characters):
        # all of them unless the keys are long.
        n = len(keys)
        if sum(map(len, keys)) + 9 * n > _CLEAN_BYTES:
            used = n = 0
            for k in keys:
                used += len(k) + 9
                if used > _CLEAN_BYTES:
                    break
                n += 1
        more = len(clean) - n
        out.append(
            f"<details class='clean'><summary>{_plural(len(clean), 'clean workflow')} "
            "(no finding): show</summary><ul class='cleanlist'>"
            + ("<li>" + "</li><li>".join(keys[:n]) + "</li>" if n else "")
            + "</ul>"
            + (f"<p class='note'>… and {more:,} more (not listed).</p>" if more else "")
            + "</details>"
        )
    return "".join(out)


def _escape_each(texts: list[str]) -> list[str]:
    """``escape`` of each text, in one call over them all joined by NUL when
    none holds a NUL (5,000 calls of ``escape``, five ``str.replace`` each,
    were most of the clean list's cost); else one call each."""
    joined = "\0".join(texts)
    if joined.count("\0") != max(0, len(texts) - 1):
        return [escape(t) for t in texts]
    return escape(joined).split("\0") if texts else []


def _others(n_undrawn: int) -> str:
    """The findings of the workflows without a section (and of long
    sections past their first rows), from the embedded data (``f``)."""
    head = (
        f"Findings of the other {_plural(n_undrawn, 'flagged workflow')}"
        if n_undrawn
        else "More findings"
    )
    return (
        f"<h2 id='others'>{head}</h2>"
        "<div class='panel paged' data-table='f'><div class='pager-tools'>"
        "<input type='search' placeholder='filter by workflow key' aria-label='filter'>"
        "<span class='sp'></span><span class='pg'></span></div>"
        "<table class='cardable findings'><thead><tr><th>workflow</th><th class='nw'>#</th>"
        "<th>severity</th><th>kind</th><th class='nw'>at</th><th>what happened</th>"
        "<th>confidence</th><th>status</th></tr></thead><tbody></tbody></table></div>"
    )


def timeline_legend() -> str:
    """What the timeline's marks mean (the report's and the console's)."""
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
    replay: Replay, wf: _Workflow, health: Mapping[str, Health], coverage: Coverage | None
) -> str:
    out = [
        f"<section class='wf' id='{wf.anchor}'><div class='wf-head'><h3>{escape(wf.key)}</h3>"
        f"{_sev(wf.worst)}<span class='muted'>{_plural(len(wf.findings), 'finding')} · "
        f"{wf.open:,} open · {wf.cleared:,} cleared</span></div>"
    ]
    # The timeline first: where things went wrong at a glance; the table
    # below says what each numbered mark is and what to do.
    state = replay.states.get(wf.key)
    if state is not None:
        out.append(render_timeline(LazyTimeline(state), wf.findings, health))
    out.append(
        "<div class='tscroll'><table class='findings cardable'><tr><th class='nw'>#</th>"
        "<th>severity</th><th>kind</th>"
        "<th class='nw'>at</th><th>what happened</th><th>confidence</th><th>status</th></tr>"
    )
    for num, f in enumerate(wf.findings[:SECTION_ROWS], 1):
        h = health[f.finding_id]
        note = coverage.history_note(f) if coverage is not None else None
        out.append(
            f"<tr id='f-{f.finding_id}'>{_td('#', str(num), 'nw muted')}"
            f"{_td('severity', _sev(f.severity))}{_td('kind', f.kind.value, 'nw')}"
            f"{_td('at', _at(f), 'nw')}"
            + _td(
                "what happened",
                f"{escape(describe(f))}<div class='action'>{escape(f.action)}</div>",
                "what",
            )
            + _td("confidence", _confidence(f, note))
            + _td("status", f"<span class='pill {h.status}'>{h.status}</span>")
            + "</tr>"
        )
    out.append("</table></div>")
    if len(wf.findings) > SECTION_ROWS:
        out.append(
            f"<p class='note'>The first {SECTION_ROWS} findings; the other "
            f"{len(wf.findings) - SECTION_ROWS:,} are in the <a href='#others'>findings "
            "table</a> below.</p>"
        )
    out.append("</section>")
    return "".join(out)


def _confidence(f: Finding, note: str | None) -> str:
    """The confidence pill (its reason as a tooltip) and, when the key's
    partition lost records before the audit, the note saying so."""
    conf = f.confidence.value
    tip = confidence_reason(f) + (f"; {note}" if note else "")
    pill = f"<span class='pill {conf}' title='{escape(tip, quote=True)}'>{conf}</span>"
    if note:
        pill += f"<div class='hnote'>{escape(note)}</div>"
    return pill


def _title(e: Evidence) -> str:
    return escape(
        f"{e.position}: {e.type} · epoch {e.epoch} · {e.worker_id}"
        + (f" · {e.effect_key}" if e.effect_key else ""),
        quote=True,
    )


class Events(Protocol):
    """What :func:`render_timeline` reads of a workflow's evidence: its
    length and its records by index (a list, or :class:`LazyTimeline`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Evidence: ...


class LazyTimeline:
    """A key's :meth:`~streams.core.detector.KeyState.timeline`, each record
    built when it is read: a page draws at most ``MAX_MARKS`` of a
    workflow's events, and building all of them was a tenth of the HTML
    report of one 100,000-event workflow."""

    __slots__ = ("_n", "_state")

    def __init__(self, state: KeyState) -> None:
        self._state = state
        self._n = len(state)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int, /) -> Evidence:
        return self._state.evidence(i)

    def columns(self) -> tuple[list[int], list[int], list[str], list[str]]:
        """The positions, epochs, worker ids and types of every event
        (``KeyState.timeline_columns()``, built compiled)."""
        return self._state.timeline_columns()


def render_timeline(
    events: Events,
    findings: list[Finding],
    health: Mapping[str, Health],
) -> str:
    """One workflow's ownership timeline (a ``<div class='tl'>``): ``events``
    its retained evidence in position order (``KeyState.timeline()``),
    ``findings`` its findings in report order (their marks are numbered in
    that order), ``health`` the health of each by finding id. Styled by
    :data:`~streams.report.html_assets.CSS`; its buttons work with
    :data:`~streams.report.html_assets.JS`."""
    if not events:
        return "<p class='note'>No evidence retained for this workflow.</p>"
    n = len(events)
    # Per-event columns, built once: the passes below over every retained
    # event (100,000 in one workflow) are C calls on these lists (Counter,
    # set, dict, zip), not Python loops over Evidence objects.
    if isinstance(events, LazyTimeline):
        pos_l, ep_l, worker_l, type_l = events.columns()
    else:
        every = [events[i] for i in range(n)]
        pos_l = [e.position for e in every]
        ep_l = [e.epoch for e in every]
        worker_l = [e.worker_id for e in every]
        type_l = [e.type for e in every]
    # Event indices by position, for the positions findings name only (a
    # position can hold several events; positions are not in index order:
    # an event without a seq sits at its offset).
    wanted = {_position(f) for f in findings}
    wanted.update(ev.position for f in findings for ev in f.evidence)
    by_pos: dict[int, list[int]] = {}
    for i in compress(range(n), map(wanted.__contains__, pos_l)):
        by_pos.setdefault(pos_l[i], []).append(i)

    # Where each finding sits: its raising event (by position and type).
    raising: dict[int, list[tuple[int, Finding]]] = {}
    unplaced: list[tuple[int, Finding]] = []
    for num, f in enumerate(findings, 1):
        idxs = by_pos.get(_position(f), [])
        idx = next((i for i in idxs if type_l[i] == f.event_type), None)
        if idx is None and idxs:
            idx = idxs[0]
        if idx is None:
            unplaced.append((num, f))
        else:
            raising.setdefault(idx, []).append((num, f))
    hits = len(raising) + (1 if unplaced else 0)
    # Each epoch's first event, and its first four workers in order.
    firsts, workers = epoch_starts(ep_l, worker_l, 4)
    # Draw the windows around findings when the marks then fit the width
    # (a column with findings keeps 22 px, a collapsed run 22 px, the others
    # shrink); else "dense": only the raising events and acquisitions in full,
    # smaller marks (15 px). When even that does not fit, the timeline
    # scrolls inside itself (never the page) and says so.
    keep = _kept(n, raising, by_pos, firsts, dense=False)
    dense = 22 * (hits + _runs(keep)) > FIT_PX
    if dense:
        keep = _kept(n, raising, by_pos, firsts, dense=True)
    acq = set(firsts.values())
    overflow = dense and 15 * hits > FIT_PX
    epochs = sorted(firsts, reverse=True)
    lane = {ep: k for k, ep in enumerate(epochs)}

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
    prev = -1
    for k in [*sorted(keep), n]:
        i = prev + 1  # the events between two kept ones: one drawn, or a run
        if k - i == 1:
            cols.append(col(i))
        elif k - i > 1:
            expandable = k - i <= budget
            if expandable:
                budget -= k - i
            else:
                capped = True
            cols.append(_run(pos_l, ep_l, type_l, i, k, lane, expandable, col))
        if k < n:
            cols.append(col(k))
        prev = k

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
    n: int,
    raising: Mapping[int, list[tuple[int, Finding]]],
    by_pos: Mapping[int, list[int]],
    firsts: Mapping[int, int],
    *,
    dense: bool,
) -> set[int]:
    """The indices of the events drawn in full (the rest collapse into
    runs): the ends, around each finding's raising event (and, unless
    ``dense``, its evidence), and around where each epoch first appears
    (``firsts``: epoch -> index of its acquisition, or its first act)."""
    window, around = (0, 0) if dense else (WINDOW, 1)
    keep: set[int] = {0, n - 1}
    for idx, marks in raising.items():
        keep.update(range(max(0, idx - window), min(n, idx + window + 1)))
        if not dense:
            for _, f in marks:
                for ev in f.evidence:
                    keep.update(by_pos.get(ev.position, ()))
    for i in firsts.values():
        keep.update(range(max(0, i - around), min(n, i + around + 1)))
    return keep


def _runs(keep: set[int]) -> int:
    """How many collapsed runs (two or more events not kept) there are: gaps
    of two or more between consecutive kept indices (the first and last
    event are always kept)."""
    ks = sorted(keep)
    return sum(1 for a, b in pairwise(ks) if b - a > 2)


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
    pos_l: list[int],
    ep_l: list[int],
    type_l: list[str],
    start: int,
    end: int,
    lane: Mapping[int, int],
    expandable: bool,
    col: Any,
) -> str:
    """A collapsed run of events ``start..end-1``: one column with a count per
    lane; its events, while the budget lasts, in a ``<template>`` (parsed but
    not in the page until a click expands the run: a large page stays quick
    to lay out)."""
    per_lane: Counter[int] = Counter(ep_l[start:end])
    types = Counter(type_l[start:end])
    span = f"positions {pos_l[start]}-{pos_l[end - 1]}"
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
        f"{counts}</button><template>{detail}</template></div>"
    )


def _invalid(replay: Replay) -> str:
    if not replay.invalid_count:
        return ""
    out = [
        f"<h2>Invalid input</h2><p class='muted'>{_plural(replay.invalid_count, 'record')} "
        "skipped.</p><div class='panel'><table class='cardable'><tr><th>where</th><th>field</th>"
        "<th>reason</th></tr>"
    ]
    used = listed = 0
    for inv in replay.invalid[:MAX_INVALID_LISTED]:
        where = f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"
        row = (
            f"<tr>{_td('where', escape(where), 'key')}{_td('field', escape(inv.field or ''))}"
            f"{_td('reason', escape(inv.reason))}</tr>"
        )
        used += len(row)
        if used > _INVALID_BYTES:
            break
        out.append(row)
        listed += 1
    out.append("</table></div>")
    if replay.invalid_count > listed:
        out.append(
            f"<p class='note'>The first {listed:,} are listed; --format json lists "
            "the first 10,000.</p>"
        )
    return "".join(out)
