"""The console against a real broker and the live processor, checked in
headless Chromium: the list loads and shows a new finding within 2 s
without a reload; a workflow with 5 takeovers shows every finding mark on
its timeline; hostile event values stay text and run no script; without the
token there is no form and a POST is refused; with it, a verification makes
the finding show as cleared once the processor has handled it."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.console.app import ConsoleApp
from streams.console.view import workflow_href
from streams.core.replay import Replay
from streams.kafka.connection import KafkaConnection
from streams.kafka.keyread import key_partitions
from streams.kafka.reader import END
from streams.kafka.tail import TopicTail
from tests.console.browser import Browser
from tests.console.conftest import TOKEN, Stack
from tests.strategies import takeover_workflow

#: Where the verification screenshots are written when set (docs/img; the list's
#: and a workflow's are scripts/render-console-screenshot --pages operate).
SHOTS = os.environ.get("FENCEWATCH_CONSOLE_SCREENSHOTS")


def _ev(key: str, seq: int, type_: str, epoch: int, worker: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": type_,
        "workflow_key": key,
        "epoch": epoch,
        "worker_id": worker,
        "seq": seq,
        **extra,
    }


def _stale_commit(
    key: str, worker_a: str = "agent-a", effect: str = "fx-1", **extra: Any
) -> list[dict[str, Any]]:
    """Epoch 1 displaced by epoch 2, then commits anyway (stale_commit, incident)."""
    return [
        _ev(key, 1, "lease_acquired", 1, worker_a),
        _ev(key, 2, "lease_acquired", 2, "agent-b"),
        _ev(key, 3, "effect_committed", 1, worker_a, effect_key=effect, **extra),
    ]


def _wait_view(app: ConsoleApp, done: Any, timeout: float = 60.0) -> None:
    """Until ``done(view)`` holds, waking on each change of the view."""
    deadline = time.monotonic() + timeout
    seen = -1
    while not done(app.view):
        left = deadline - time.monotonic()
        assert left > 0, "the console never showed it"
        seen = app.view.wait_change(seen, left)


def _held(app: ConsoleApp, key: str, n_findings: int) -> bool:
    """The console holds the key's status record and ``n_findings`` findings
    (the two topics are followed by two threads: either may come first)."""
    data = app.view.workflow(key)
    return data is not None and data["status"] is not None and len(data["findings"]) == n_findings


def _stale_events(app: ConsoleApp, key: str) -> dict[int, int]:
    """Per displaced epoch, its stale event count on the status record the console holds."""
    status = (app.view.workflow(key) or {}).get("status") or {}
    return {s["epoch"]: s["events"] for s in status.get("stale_epochs") or []}


def _findings_of(app: ConsoleApp, key: str) -> set[str]:
    data = app.view.workflow(key)
    return {f["finding_id"] for f in data["findings"]} if data else set()


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_list_loads_and_a_new_finding_appears_within_2s_without_reload(
    stack: Stack, browser: Browser
) -> None:
    """/ loads; a finding produced on the broker is on the page within 2 s, same document."""
    stack.produce(_stale_commit("live/first"))
    _wait_view(stack.read_only, lambda v: v.workflow("live/first") is not None)
    browser.goto(stack.read_only.url + "/")
    browser.wait_for("document.querySelector('tr[data-key=\"live/first\"]')")
    browser.evaluate("window.__sameDocument = 1")
    key = "live/arrives-later"
    seen = threading.Event()
    tail = TopicTail(KafkaConnection(stack.harness.bootstrap), stack.harness.findings, start=END)
    landed: list[float] = []

    def watch() -> None:
        while not seen.is_set():
            rec = tail.poll(0.2)
            if rec is not None and rec.key == key.encode():
                landed.append(time.monotonic())
                seen.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stack.produce(_stale_commit(key))
        assert seen.wait(60), "the processor produced no finding"
        # The row with what the status record says (the worst severity, the owner).
        row = f"document.querySelector('tr[data-key={json.dumps(key)}]')"
        browser.wait_for(f"{row} && {row}.textContent.indexOf('agent-b') >= 0", timeout_s=10)
        shown = time.monotonic()
    finally:
        seen.set()
        watcher.join(10)
        tail.close()
    assert shown - landed[0] <= 2.0, shown - landed[0]
    assert browser.evaluate("window.__sameDocument") == 1  # no reload
    row = browser.evaluate(f"document.querySelector('tr[data-key={json.dumps(key)}]').textContent")
    assert "incident" in row and "epoch 2 · agent-b" in row and "epoch 1 · agent-a" in row


def test_timeline_of_five_takeovers_shows_every_finding_mark(
    stack: Stack, browser: Browser
) -> None:
    """/w/<key> draws the replayed timeline with a visible mark for every finding."""
    key = "tenant-7/nightly-export"
    docs = takeover_workflow(key, n_events=300, takeovers=5)
    replay = Replay()
    for n, d in enumerate(docs, 1):
        replay.feed(orjson.dumps(d), offset=n, source="t")
    expected = set(replay.latest)
    assert len(expected) == 7  # one or two per takeover (tests/strategies.py)
    stack.produce(docs)
    _wait_view(stack.read_only, lambda v: _findings_of(stack.read_only, key) == expected)
    browser.goto(stack.read_only.url + workflow_href(key))
    marks = browser.evaluate(
        "Array.from(document.querySelectorAll('.fmark[data-finding]')).map(function(m){"
        " var b = m.getBoundingClientRect();"
        " return [m.getAttribute('data-finding'), b.width > 0]; })"
    )
    assert {m[0] for m in marks} == expected
    assert all(visible for _, visible in marks)
    labels = browser.evaluate(
        "Array.from(document.querySelectorAll('.lane-label b')).map(function(b){"
        " return b.textContent; })"
    )
    assert labels == [f"epoch {k}" for k in range(6, 0, -1)]
    # Every event sits in its epoch's lane (six distinct heights), not all in one row.
    tops = browser.evaluate(
        "Array.from(new Set(Array.from(document.querySelectorAll('.tl i.ev')).filter(function(e){"
        " return e.getBoundingClientRect().width > 0; }).map(function(e){"
        " return Math.round(e.getBoundingClientRect().top); })))"
    )
    assert len(tops) == 6, tops
    note = browser.evaluate("document.getElementById('replay-note').textContent")
    assert "Replayed 300 of this workflow's events" in note
    # The report's legend under the timeline: what each mark means.
    legend = browser.evaluate("document.querySelector('.legend').textContent")
    assert "finding (numbered as in its table" in legend and "collapsed run" in legend


def test_a_replay_stops_at_n_events_and_says_so(stack: Stack, browser: Browser) -> None:
    """More than N events of a key: the last N are drawn and the page says only those."""
    key = "long/run"
    docs = [_ev(key, 1, "lease_acquired", 1, "w1")] + [
        _ev(key, s, "progress", 1, "w1") for s in range(2, 602)
    ]
    stack.produce(docs)
    _wait_view(
        stack.read_only,
        lambda v: (
            v.workflow(key) is not None
            and (v.workflow(key)["status"] or {}).get("last_position") == 601
        ),
    )
    browser.goto(stack.read_only.url + workflow_href(key))
    note = browser.evaluate("document.getElementById('replay-note').textContent")
    assert "Only the last 500 events are shown (601 were read)" in note


HOSTILE_WORKER = '"><svg onload="window.__pwned=3">'
HOSTILE_EFFECT = "</script><script>window.__pwned=4</script>\u2028\u2029"
HOSTILE_SINK = "' onmouseover='window.__pwned=5"
HOSTILE_KEYS = [
    "<script>window.__pwned=1</script>\"'&amp;",
    '</script><img src=x onerror="window.__pwned=2">\u2028',
]
#: A 64 KiB key (past the event limit of 512 characters, so it reaches the
#: console as a status record written straight to the status topic).
BIG_KEY = ("<script>window.__pwned=6</script>" * 2000)[:65536]

_NO_SCRIPT_RAN = (
    "window.__pwned === undefined && document.querySelectorAll('img,svg,iframe').length === 0"
)


def test_hostile_values_stay_text_and_run_no_script(stack: Stack, browser: Browser) -> None:
    """<script>, quotes, </script>, U+2028 and a 64 KiB key show as text; no script runs."""
    for key in HOSTILE_KEYS:
        stack.produce(_stale_commit(key, HOSTILE_WORKER, HOSTILE_EFFECT, sink=HOSTILE_SINK))
    status = {
        "workflow_key": BIG_KEY,
        "current_epoch": 2,
        "current_worker": HOSTILE_WORKER,
        "acquired_seq": 2,
        "acquisition_implied": False,
        "released": False,
        "last_position": 3,
        "stale_epochs": [
            {
                "epoch": 1,
                "worker": HOSTILE_WORKER,
                "events": 1,
                "last_position": 3,
                "last_seen_ms": 1_700_000_000_000,
            }
        ],
        "open": [
            {"finding_id": "f" * 64, "kind": "stale_commit", "severity": "incident", "revision": 1}
        ],
        "cleared": [],
        "worst_open": "incident",
        "updated_ms": 1_700_000_000_000,
    }
    stack.produce_raw(stack.harness.status, [(BIG_KEY.encode(), orjson.dumps(status))])
    wanted = [*HOSTILE_KEYS, BIG_KEY]
    _wait_view(
        stack.read_only,
        lambda v: (
            all(_held(stack.read_only, k, 1) for k in HOSTILE_KEYS)
            and (v.workflow(BIG_KEY) or {}).get("status") is not None
        ),
    )
    browser.goto(stack.read_only.url + "/?prefix=" + "%3C")
    shown = browser.wait_for(
        "document.querySelectorAll('#rows tr').length >= 3 &&"
        " Array.from(document.querySelectorAll('#rows td.key a')).map(function(a){"
        " return a.textContent; })"
    )
    assert sorted(shown) == sorted(wanted)
    owners = browser.evaluate(
        "Array.from(document.querySelectorAll('#rows td.stale-cell')).map(function(t){"
        " return t.textContent; })"
    )
    assert len(owners) == 3 and all(f"epoch 1 · {HOSTILE_WORKER}" in o for o in owners)
    assert browser.evaluate(_NO_SCRIPT_RAN) is True
    assert browser.evaluate("document.scripts.length") == 1
    for key in [*HOSTILE_KEYS, BIG_KEY]:
        browser.goto(stack.read_only.url + workflow_href(key))
        assert browser.evaluate("document.querySelector('h3.wkey').textContent") == key
        assert browser.evaluate(_NO_SCRIPT_RAN) is True
        assert browser.evaluate("document.scripts.length") == 2
    # The last hostile workflow with findings: its timeline and finding tables as text.
    browser.goto(stack.read_only.url + workflow_href(HOSTILE_KEYS[1]))
    text = browser.evaluate("document.body.innerText")
    assert HOSTILE_EFFECT.strip("\u2028\u2029") in text and HOSTILE_SINK in text
    labels = browser.evaluate(
        "Array.from(document.querySelectorAll('.lane-label small')).map(function(s){"
        " return s.textContent; })"
    )
    assert HOSTILE_WORKER in labels
    assert browser.evaluate(_NO_SCRIPT_RAN) is True
    assert browser.console_errors == []


def test_without_token_the_form_is_absent_and_posts_are_refused(
    stack: Stack, browser: Browser
) -> None:
    """Read-only console: says so, no verification form, every POST 403."""
    key = "ro/stale-commit"
    stack.produce(_stale_commit(key))
    _wait_view(stack.read_only, lambda v: bool(_findings_of(stack.read_only, key)))
    browser.goto(stack.read_only.url + workflow_href(key))
    assert browser.evaluate("document.getElementById('read-only') !== null") is True
    assert browser.evaluate("document.querySelectorAll('form.verify').length") == 0
    fid = next(iter(_findings_of(stack.read_only, key)))
    url = stack.read_only.url
    origin = {"Origin": url}
    form = f"finding_id={fid}&by=Mallory".encode()
    assert _post(f"{url}{workflow_href(key)}/verify", form, origin) == 403
    body = orjson.dumps({"workflow_key": key, "finding_id": fid, "by": "Mallory"})
    assert _post(f"{url}/api/verify", body, {"Authorization": f"Bearer {TOKEN}"}) == 403
    # The console with a token refuses a POST without credentials (401) or from elsewhere (403).
    other = stack.with_token.url
    assert _post(f"{other}/api/verify", body, {}) == 401
    evil = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
    assert _post(f"{other}/api/verify", body, evil) == 403


#: Computed colours of the stale epochs' rows: the critical one while a finding
#: is open, the muted one once none is (the report's --crit and --muted).
CRIT = "rgb(197, 34, 31)"
MUTED = "rgb(95, 103, 115)"


def _stands(epoch: int) -> str:
    """An expression: the findings cell and colour of a displaced epoch's row."""
    row = f"document.querySelector('tr[data-stale-epoch=\"{epoch}\"]')"
    return (
        f"(function(r){{ var c = r.querySelector('td.stands');"
        f" return [c.textContent, getComputedStyle(c).color]; }})({row})"
    )


def _list_stale(app: ConsoleApp, browser: Browser, key: str) -> list[list[str]]:
    """The list page's stale epoch lines of ``key``: text and colour."""
    browser.goto(app.url + "/?prefix=" + urllib.parse.quote(key, safe=""))
    row = f"document.querySelector('tr[data-key={json.dumps(key)}]')"
    browser.wait_for(f"{row} && {row}.querySelector('span.stale')")
    return browser.evaluate(  # type: ignore[no-any-return]
        f"Array.from({row}.querySelectorAll('span.stale')).map(function(s){{"
        " return [s.textContent, getComputedStyle(s).color]; })"
    )


def _billing_run(key: str) -> list[dict[str, Any]]:
    """A billing agent paused mid-run and replaced; on waking it charges the
    invoice anyway (stale_commit), and its retry of that charge is refused by
    the payment gateway, which fences it (stale_attempt, rejected)."""
    old, new = "billing-agent-7f3c", "billing-agent-91ad"
    charge = {"effect_key": "charge:INV-2207", "sink": "payment-gateway"}
    return [
        _ev(key, 1, "lease_acquired", 1, old),
        _ev(key, 2, "progress", 1, old, attrs={"step": "load invoice INV-2207"}),
        _ev(key, 3, "lease_acquired", 2, new),
        _ev(key, 4, "progress", 2, new, attrs={"step": "load invoice INV-2207"}),
        _ev(key, 5, "effect_committed", 1, old, **charge),
        _ev(key, 6, "effect_rejected", 1, old, **charge),
        _ev(key, 7, "progress", 2, new, attrs={"step": "hold: charge under review"}),
    ]


def test_verification_with_token_shows_the_finding_cleared(stack: Stack, browser: Browser) -> None:
    """Log in, record a verification in the form: once the processor handled the
    outcome_verified event the stale_commit shows as cleared (fenced and verified)."""
    key = "billing-agent/run-2207"
    # The stale worker is fenced: a destination refused it after its displacement.
    stack.produce(_billing_run(key))
    app = stack.with_token
    _wait_view(app, lambda v: _held(app, key, 2) and _stale_events(app, key) == {1: 2})
    commit = next(
        f["finding_id"]
        for f in app.view.workflow(key)["findings"]  # type: ignore[index]
        if f["revisions"][-1]["kind"] == "stale_commit"
    )
    # The list: the displaced epoch in the critical colour, no suffix.
    [(line, colour)] = _list_stale(app, browser, key)
    assert line.startswith("epoch 1 · billing-agent-7f3c · 2 events · last seen ")
    assert colour == CRIT and "finding" not in line
    browser.goto(app.url + workflow_href(key))
    assert browser.evaluate("document.querySelectorAll('form.verify').length") == 0
    browser.navigate_by(
        f"document.querySelector('#login input[name=token]').value = {json.dumps(TOKEN)};"
        " document.getElementById('login').submit();"
    )
    assert browser.evaluate("document.querySelectorAll('form.verify').length") == 1
    pill = f"document.querySelector('[data-health=\"{commit}\"]').textContent"
    assert browser.evaluate(pill) == "open"
    assert browser.evaluate(_stands(1)) == ["2 open", CRIT]
    if SHOTS:
        browser.screenshot(Path(SHOTS) / "console-verify.png", full_height=1100)
    browser.navigate_by(
        "var f = document.querySelector('form.verify');"
        " f.querySelector('input[name=by]').value = 'Dana Operator'; f.submit();"
    )
    assert "Published outcome_verified" in browser.evaluate(
        "document.getElementById('notice').textContent"
    )
    browser.wait_for(f"{pill} === 'cleared'", timeout_s=60)
    # No form left to submit (hidden once cleared; absent if cleared when the page was drawn).
    form_gone = "(function(f){ return !f || getComputedStyle(f).display === 'none'; })" + (
        "(document.querySelector('form.verify'))"
    )
    assert browser.evaluate(form_gone) is True
    status = app.view.workflow(key)["status"]  # type: ignore[index]
    assert commit in {f["finding_id"] for f in status["cleared"]}
    verified = [
        json.loads(v)
        for k, v, _p, _o in stack.harness.read(stack.harness.events)
        if k == key.encode() and b"outcome_verified" in (v or b"")
    ]
    assert [(d["worker_id"], d["attrs"]["verified_by"], d["epoch"]) for d in verified] == [
        ("person:Dana Operator", "Dana Operator", 2)
    ]
    # One verification of the charge cleared both (the refused retry was of the
    # same effect): the page's script says so and mutes the row, in place.
    browser.wait_for(f"{_stands(1)}[0] === 'all 2 cleared'", timeout_s=30)
    assert browser.evaluate(_stands(1)) == ["all 2 cleared", MUTED]
    if SHOTS:
        browser.screenshot(Path(SHOTS) / "console-verified.png", full_height=1100)
    # The page as the server draws it says the same; the list mutes the epoch.
    browser.goto(app.url + workflow_href(key))
    assert browser.evaluate(_stands(1)) == ["all 2 cleared", MUTED]
    [(line, colour)] = _list_stale(app, browser, key)
    assert line.startswith("epoch 1 · billing-agent-7f3c · 2 events · last seen ")
    assert line.endswith(" · findings cleared") and colour == MUTED


def test_each_displaced_epoch_says_how_its_findings_stand(stack: Stack, browser: Browser) -> None:
    """Open and cleared, all cleared, no finding: each epoch's cell and colour, drawn and polled."""
    key = "refund-agent/run-5120"
    w = {e: f"refund-agent-{e}c0{e}" for e in range(1, 5)}
    refund = {"effect_key": "refund:R-5120", "sink": "payments"}
    stack.produce(
        [
            *(_ev(key, e, "lease_acquired", e, w[e]) for e in range(1, 5)),
            # Epoch 1: a stale refund (cleared below) and a refused stale email (left open).
            _ev(key, 5, "effect_committed", 1, w[1], **refund),
            _ev(key, 6, "effect_rejected", 1, w[1], effect_key="email:R-5120", sink="mailer"),
            # Epoch 2: a refused stale refund (cleared below); epoch 3: a stale release only.
            _ev(key, 7, "effect_rejected", 2, w[2], **refund),
            _ev(key, 8, "lease_released", 3, w[3]),
            _ev(key, 9, "outcome_verified", 4, w[4], effect_key="refund:R-5120"),
        ]
    )
    app = stack.read_only

    def settled(v: Any) -> bool:
        status = (v.workflow(key) or {}).get("status") or {}
        return (
            _held(app, key, 3)
            and _stale_events(app, key) == {1: 2, 2: 1, 3: 1}
            and (len(status.get("open") or ()), len(status.get("cleared") or ())) == (1, 2)
        )

    _wait_view(app, settled)
    browser.goto(app.url + workflow_href(key))
    want = {1: ["1 open · 1 cleared", CRIT], 2: ["1 cleared", MUTED], 3: ["no finding", MUTED]}
    assert {e: browser.evaluate(_stands(e)) for e in want} == want
    # The page's poll draws the same words (blanked here, redrawn by the script).
    browser.evaluate(
        "document.querySelectorAll('td.stands').forEach(function(c){ c.textContent = ''; })"
    )
    browser.wait_for(f"{_stands(3)}[0] === 'no finding'", timeout_s=30)
    assert {e: browser.evaluate(_stands(e)) for e in want} == want
    # The list: one finding is open, so every epoch stays in the critical colour.
    lines = _list_stale(app, browser, key)
    assert [c for _, c in lines] == [CRIT] * 3 and not any("finding" in t for t, _ in lines)


def test_api_verify_with_bearer_token(stack: Stack) -> None:
    """POST /api/verify with the bearer token publishes at the current epoch; no name is 400."""
    key = "api/verify"
    stack.produce(_stale_commit(key))
    app = stack.with_token
    _wait_view(app, lambda v: _held(app, key, 1))
    fid = next(iter(_findings_of(app, key)))
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    nameless = orjson.dumps({"workflow_key": key, "finding_id": fid, "by": "  "})
    assert _post(f"{app.url}/api/verify", nameless, auth) == 400
    body = orjson.dumps({"workflow_key": key, "finding_id": fid, "by": "Ops Bot", "note": "ok"})
    assert _post(f"{app.url}/api/verify", body, auth) == 200
    verified = [
        json.loads(v)
        for k, v, _p, _o in stack.harness.read(stack.harness.events)
        if k == key.encode() and b"outcome_verified" in (v or b"")
    ]
    assert [(d["worker_id"], d["epoch"], d["effect_key"], d["attrs"]) for d in verified] == [
        ("person:Ops Bot", 2, "fx-1", {"verified_by": "Ops Bot", "note": "ok"})
    ]


def test_metrics_and_api(stack: Stack) -> None:
    """/metrics is the console's own; /api/workflows pages and filters like the page."""
    with urllib.request.urlopen(stack.read_only.url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    assert "fencewatch_console_records_total" in text and "fencewatch_console_workflows" in text
    with urllib.request.urlopen(
        stack.read_only.url + "/api/workflows?severity=incident&prefix=live%2F", timeout=30
    ) as resp:
        doc = json.loads(resp.read())
    assert doc["page_size"] == 500 and doc["read_only"] is True
    assert all(w["workflow_key"].startswith("live/") for w in doc["workflows"])


def test_an_unknown_api_path_is_a_json_404(stack: Stack) -> None:
    """/api and /api/<unknown> answer JSON (an API client's), not the HTML page."""
    for path in ("/api", "/api/nope"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(stack.read_only.url + path, timeout=30)
        assert err.value.code == 404
        assert err.value.headers["Content-Type"].startswith("application/json")
        assert json.loads(err.value.read()) == {"error": "no such route"}


def test_key_partitions_cover_both_partitioners(stack: Stack) -> None:
    """murmur2 and CRC32 as the broker's clients place keys: the replay reads the right one."""
    from confluent_kafka import Producer

    got: dict[tuple[str, bytes], int] = {}
    for name in ("murmur2_random", "consistent_random"):
        p = Producer({"bootstrap.servers": stack.harness.bootstrap, "partitioner": name})
        for i in range(40):
            key = f"k-{i}".encode()

            def record(err: Any, msg: Any, name: str = name, key: bytes = key) -> None:
                assert err is None
                got[(name, key)] = msg.partition()

            p.produce(stack.harness.dlq, b"x", key=key, on_delivery=record)
        assert p.flush(30) == 0
    for (_name, key), partition in got.items():
        assert partition in key_partitions(key, 3), (key, partition)
