"""The console's HTML pages. Every string that comes from the topics is
escaped here (``html.escape``, quotes included) or set by the page's script
as text; scripts run only with the page's nonce (the server's
Content-Security-Policy), so markup that slipped through could not run one.

The records reach these pages checked (:mod:`streams.console.check`): a
value no page can show is null, and the record's ``invalid`` says why (shown
on its row, its status block or its finding). The renderers here still take
any value without raising: a page is never an error because of a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from streams.console.assets import CSS, INDEX_JS, WORKFLOW_JS
from streams.console.view import workflow_href
from streams.report.html import timeline_legend
from streams.report.html_assets import CSS as REPORT_CSS
from streams.report.html_assets import JS as REPORT_JS

__all__ = [
    "VERIFIABLE",
    "Chrome",
    "epoch_findings",
    "findings_label",
    "index_page",
    "message_page",
    "workflow_href",
    "workflow_page",
]

#: Kinds a person may verify from the console.
VERIFIABLE = frozenset({"stale_commit", "conflicting_commit"})
_SEVERITIES = ("critical", "incident", "warning", "diagnostic")


@dataclass(frozen=True, slots=True)
class Chrome:
    """What every page says about the console itself."""

    nonce: str
    #: "read-only" (no token), "login" (token, no session), "verify" (session).
    mode: str
    errors: tuple[str, ...]
    path: str


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _ms(ms: object) -> str:
    if type(ms) is not int or ms < 0:
        return "unknown"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # past year 9999
        return f"invalid time ({ms} ms)"


def _head(title: str, chrome: Chrome, extra_css: str = "") -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{REPORT_CSS}{CSS}{extra_css}"
        "</style></head>"
    )


def _top(chrome: Chrome) -> str:
    out = [
        "<header class='top'><h1><a href='/'>fencewatch console</a></h1><span class='sp'></span>"
    ]
    if chrome.mode == "verify":
        out.append(
            "<form method='post' action='/logout'><span class='muted'>verification enabled</span> "
            "<button type='submit'>log out</button></form>"
        )
    elif chrome.mode == "login":
        out.append(
            f"<form method='post' action='/login' id='login'>"
            f"<input type='hidden' name='next' value='{_e(chrome.path)}'>"
            "<input type='password' name='token' placeholder='console token' required "
            "autocomplete='current-password'> "
            "<button type='submit'>log in to verify</button></form>"
        )
    out.append("</header>")
    if chrome.mode == "read-only":
        out.append(
            "<div class='banner ro' id='read-only'>Read-only: this console was started without "
            "FENCEWATCH_SERVE_TOKEN, so it cannot record verifications (use "
            "<code>fencewatch verify</code>).</div>"
        )
    for err in chrome.errors:
        out.append(f"<div class='banner err'>{_e(err)}</div>")
    return "".join(out)


def _processor_banner(processor: dict[str, Any] | None) -> str:
    """The processor's banner (hidden when there is nothing to say): an
    error while it is stalled, a note while it has not committed; the list's
    script keeps it current."""
    if processor is None:
        return "<div class='banner ro' id='processor' data-stalled='false' hidden></div>"
    stalled = bool(processor.get("stalled"))
    return (
        f"<div class='banner {'err' if stalled else 'ro'}' id='processor' "
        f"data-stalled='{'true' if stalled else 'false'}'>{_e(processor.get('message', ''))}</div>"
    )


def index_page(
    chrome: Chrome,
    *,
    prefix: str,
    severity: str,
    page: int,
    processor: dict[str, Any] | None = None,
) -> str:
    """The list of workflows: an empty table the script fills and keeps current.
    ``processor``: the processor banner's message and whether it is stalled."""
    options = [("", "any (all workflows)"), ("open", "any open finding")] + [
        (s, f"{s} or worse") for s in _SEVERITIES
    ]
    opts = "".join(
        f"<option value='{v}'{' selected' if v == severity else ''}>{label}</option>"
        for v, label in options
    )
    return (
        _head("fencewatch console", chrome)
        + "<body><main>"
        + _top(chrome)
        + _processor_banner(processor)
        + "<p class='sub'>Every workflow on the status topic, worst first: its open findings, "
        "its current owner, and the displaced epochs still acting (with when each was last "
        "seen: broker time; grey when none of the workflow's findings is open). The list "
        "updates every second.</p>"
        "<form class='filters' method='get' action='/'>"
        f"<label>key prefix <input type='text' name='prefix' value='{_e(prefix)}'></label>"
        f"<label>worst open <select name='severity'>{opts}</select></label>"
        f"<input type='hidden' name='page' value='{page}'>"
        "<button type='submit'>filter</button><span class='live' id='live'>loading…</span></form>"
        "<div class='panel'><table class='workflows'><thead><tr><th class='nw'>worst open</th>"
        "<th class='num'>open</th><th class='num'>cleared</th><th>workflow</th>"
        "<th>current owner</th><th>stale epochs still acting</th><th>updated</th></tr></thead>"
        "<tbody id='rows'></tbody></table>"
        "<p class='note muted' id='empty' hidden>No workflow matches.</p></div>"
        f"<div class='pager'><span id='pager'></span>{_pager(prefix, severity, page)}</div>"
        f"<script nonce='{chrome.nonce}'>{INDEX_JS}</script></main></body></html>"
    )


def _pager(prefix: str, severity: str, page: int) -> str:
    """The previous and next links, hidden: the script shows each when the
    list has that page (it knows how many pages there are; this does not)."""

    def link(p: int, label: str, ident: str) -> str:
        q = f"?prefix={quote(prefix, safe='')}&severity={quote(severity, safe='')}&page={p}"
        return f"<a id='{ident}' href='{_e(q)}' hidden>{label}</a>"

    return f"{link(max(1, page - 1), '← previous', 'prev')} {link(page + 1, 'next →', 'next')}"


def message_page(chrome: Chrome, title: str, text: str) -> str:
    return (
        _head(title, chrome)
        + "<body><main>"
        + _top(chrome)
        + f"<h2>{_e(title)}</h2><p>{_e(text)}</p></main></body></html>"
    )


def _finding_epoch(finding: dict[str, Any]) -> int | None:
    """The stale epoch of a finding: its latest revision's that names one (a
    revision cut to fit the view's bound keeps no ``stale_epoch``)."""
    for rev in reversed(finding.get("revisions") or ()):
        epoch = rev.get("stale_epoch") if isinstance(rev, dict) else None
        if type(epoch) is int:
            return epoch
    return None


def epoch_findings(findings: list[dict[str, Any]], cleared: set[str]) -> dict[int, tuple[int, int]]:
    """Per stale epoch, how many of the findings this page holds are open and
    how many cleared (the pills' rule: cleared when the status record lists
    the finding as cleared). The script on the page counts the same way."""
    counts: dict[int, tuple[int, int]] = {}
    for f in findings:
        epoch = _finding_epoch(f)
        if epoch is None:
            continue
        n_open, n_cleared = counts.get(epoch, (0, 0))
        if str(f.get("finding_id")) in cleared:
            counts[epoch] = (n_open, n_cleared + 1)
        else:
            counts[epoch] = (n_open + 1, n_cleared)
    return counts


def findings_label(n_open: int, n_cleared: int) -> str:
    """How a displaced epoch's findings stand, in the words WORKFLOW_JS uses."""
    if n_open:
        return f"{n_open} open" + (f" · {n_cleared} cleared" if n_cleared else "")
    if n_cleared:
        return "1 cleared" if n_cleared == 1 else f"all {n_cleared} cleared"
    return "no finding"


def _status_block(
    status: dict[str, Any] | None, findings: list[dict[str, Any]], cleared: set[str]
) -> str:
    if status is None:
        return "<p class='muted'>No status record for this workflow (yet).</p>"
    owner = (
        "none"
        if status.get("current_epoch") is None
        else f"epoch {status['current_epoch']} · {status.get('current_worker')}"
    )
    rows = [
        ("current owner", owner),
        ("acquired at seq", status.get("acquired_seq")),
        ("acquisition implied", status.get("acquisition_implied")),
        ("released", status.get("released")),
        ("last position", status.get("last_position")),
        ("updated", _ms(status.get("updated_ms"))),
    ]
    out = []
    if status.get("invalid"):
        out.append(
            "<p class='banner err' id='status-invalid'>This status record holds values the "
            f"console cannot show (left empty below): {_e(status['invalid'])}</p>"
        )
    out.append("<dl class='kv'>")
    for k, v in rows:
        shown = "" if v is None else ("yes" if v else "no") if isinstance(v, bool) else v
        out.append(f"<dt>{_e(k)}</dt><dd>{_e(shown)}</dd>")
    out.append("</dl>")
    stale = status.get("stale_epochs") or []
    if stale:
        # SPEC §8's stale_epochs is evidence freshness: an epoch stays listed
        # after every finding it caused is cleared. Its findings' standing,
        # beside it, says whether anything is still to do (muted when not).
        counts = epoch_findings(findings, cleared)
        out.append(
            "<h3 style='margin:18px 0 8px'>Displaced epochs still acting</h3><div class='panel'>"
            "<table><tr><th>epoch</th><th>worker</th><th>its findings</th>"
            "<th class='num'>stale events</th><th>last position</th>"
            "<th>last seen (broker time)</th></tr>"
        )
        for s in stale:
            epoch = s.get("epoch")
            n_open, n_cleared = counts.get(epoch, (0, 0)) if type(epoch) is int else (0, 0)
            mark = f" data-stale-epoch='{epoch}'" if type(epoch) is int else ""
            out.append(
                f"<tr class='stale-row {'acting' if n_open else 'settled'}'{mark}>"
                f"<td>{_e(epoch)}</td><td class='key'>{_e(s.get('worker'))}</td>"
                f"<td class='stands'>{findings_label(n_open, n_cleared)}</td>"
                f"<td class='num'>{_e(s.get('events'))}</td>"
                f"<td>{_e(s.get('last_position'))}</td><td>{_ms(s.get('last_seen_ms'))}</td></tr>"
            )
        out.append("</table></div>")
    trimmed = status.get("trimmed")
    if trimmed:
        out.append(f"<p class='note'>The console keeps part of this record: {_e(trimmed)}</p>")
    return "".join(out)


def _revision_row(doc: dict[str, Any]) -> str:
    at = doc.get("event_seq")
    where = f"seq {at}" if at is not None else f"offset {doc.get('event_offset')}"
    detail = {k: v for k, v in doc.items() if k not in ("finding_id", "workflow_key")}
    import orjson

    text = orjson.dumps(detail, option=orjson.OPT_INDENT_2).decode()
    return (
        f"<tr class='revision'><td class='nw'>revision {_e(doc.get('revision'))}</td>"
        f"<td>{_e(doc.get('kind'))}</td><td>{_e(doc.get('severity'))}</td>"
        f"<td class='nw'>{_e(where)}</td><td>{_e(doc.get('confidence'))}</td>"
        f"<td><details><summary>record</summary><pre class='rev'>{_e(text)}</pre></details>"
        "</td></tr>"
    )


def _finding_block(
    chrome: Chrome, key: str, finding: dict[str, Any], cleared: set[str], num: int
) -> str:
    revs = finding["revisions"]
    last = revs[-1]
    fid = str(finding["finding_id"])
    status = "cleared" if fid in cleared else "open"
    sev = _e(last.get("severity"))
    out = [
        f"<section class='wf finding' id='f-{_e(fid)}'><div class='wf-head'>"
        f"<span class='muted'>#{num}</span><span class='sev {sev}'>{sev}</span>"
        f"<b>{_e(last.get('kind'))}</b>"
        f"<span class='pill {status}' data-health='{_e(fid)}'>{status}</span>"
        f"<span class='muted'>{len(revs)} revision{'s' if len(revs) != 1 else ''}</span></div>"
    ]
    if last.get("invalid"):
        out.append(
            "<p class='banner err finding-invalid'>This finding's latest revision holds values "
            f"the console cannot show (left empty): {_e(last['invalid'])}</p>"
        )
    out.append("<dl class='kv'>")
    fields = (
        ("effect", last.get("effect_key")),
        ("sink", last.get("sink")),
        ("stale epoch", f"{last.get('stale_epoch')} · {last.get('stale_worker')}"),
        ("current epoch", f"{last.get('current_epoch')} · {last.get('current_worker')}"),
        ("action", last.get("action")),
    )
    for k, v in fields:
        if v is not None:
            out.append(f"<dt>{k}</dt><dd>{_e(v)}</dd>")
    out.append(
        "</dl><div class='tscroll'><table class='revisions'><tr><th>revision</th><th>kind</th>"
        "<th>severity</th><th>raised at</th><th>confidence</th><th>the record</th></tr>"
    )
    out.extend(_revision_row(d) for d in revs)
    out.append("</table></div>")
    if last.get("kind") in VERIFIABLE and status == "open" and last.get("effect_key") is not None:
        out.append(_verify_form(chrome, key, fid, str(last["effect_key"])))
    out.append("</section>")
    return "".join(out)


def _verify_form(chrome: Chrome, key: str, fid: str, effect: str) -> str:
    if chrome.mode != "verify":
        return ""  # read-only, or not logged in: the top of the page says how
    return (
        f"<form class='verify' method='post' action='{_e(workflow_href(key))}/verify'>"
        f"<input type='hidden' name='finding_id' value='{_e(fid)}'>"
        f"<span>A person verified that effect <b>{_e(effect)}</b> has its intended outcome:</span>"
        "<input type='text' name='by' placeholder='your name' required maxlength='200'>"
        "<input type='text' name='note' placeholder='note (optional)' maxlength='1000'>"
        "<button type='submit'>record verification</button></form>"
    )


def workflow_page(
    chrome: Chrome,
    key: str,
    data: dict[str, Any],
    timeline_html: str,
    timeline_note: str,
    notice: str | None,
) -> str:
    status = data["status"]
    cleared = {f["finding_id"] for f in (status or {}).get("cleared") or []}
    n_open = (status or {}).get("open_count", 0)
    n_cleared = (status or {}).get("cleared_count", 0)
    out = [
        _head(f"fencewatch console: {key[:200]}", chrome),
        f"<body data-key='{_e(key)}'><main>",
        _top(chrome),
    ]
    if notice:
        out.append(f"<div class='notice' id='notice'>{_e(notice)}</div>")
    out.append(
        f"<section class='wf'><div class='wf-head'><h3 class='wkey'>{_e(key)}</h3>"
        f"<span class='muted' id='counts'>{_e(n_open)} open · {_e(n_cleared)} cleared</span>"
        f"<span class='sp'></span><a href='/api/w/{quote(key, safe='')}'>JSON</a></div>"
        f"{_status_block(status, data['findings'], cleared)}</section>"
    )
    out.append(f"<h2>Ownership timeline</h2>{timeline_note}{timeline_html}")
    if timeline_html:
        out.append(timeline_legend())
    findings = data["findings"]
    out.append(f"<h2>Findings ({len(findings)})</h2>")
    if data.get("dropped_revisions"):
        out.append(
            f"<p class='note'>{_e(data['dropped_revisions'])} older revisions are not kept by "
            "the console (memory bound per workflow); the findings topic has them.</p>"
        )
    for num, f in enumerate(findings, 1):
        out.append(_finding_block(chrome, key, f, cleared, num))
    out.append(
        f"</main><script nonce='{chrome.nonce}'>{REPORT_JS}</script>"
        f"<script nonce='{chrome.nonce}'>{WORKFLOW_JS}</script></body></html>"
    )
    return "".join(out)
