"""The console's in-memory view of the status and findings topics: one
bounded entry per workflow, read by the HTTP threads while the followers
write it (one lock).

Memory bound per workflow (what :meth:`ConsoleView.used_bytes` counts, and
what tests/console/test_view.py checks at 100,000 workflows): the key, plus
at most :data:`STATUS_BYTES` of its status record and :data:`FINDINGS_BYTES`
of its finding revisions (both kept as compact JSON without the key), plus a
fixed :data:`ENTRY_OVERHEAD`. Past the status bound the record's lists
(``open``, ``cleared``, ``stale_epochs``) are shortened and the record says
by how much (``trimmed``); past the findings bound the oldest superseded
revision is dropped first, then the oldest revision, and the workflow counts
what it dropped. The number of workflows is bounded by ``max_workflows``:
a workflow past it is not kept, and counted (``refused``).

Every value is checked before it is kept (:mod:`streams.console.check`): a
record with a value no page can show (``updated_ms`` of 2^63-1, a string
where an epoch should be) is kept with that value nulled and ``invalid``
saying why, and the list shows its row as invalid; the other rows are not
affected.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any
from urllib.parse import quote

import orjson

from streams.console.check import check_finding, check_status
from streams.core.records import SEVERITY_RANK, Severity

__all__ = [
    "ENTRY_OVERHEAD",
    "FINDINGS_BYTES",
    "PAGE_SIZE",
    "REVISION_BYTES",
    "STATUS_BYTES",
    "ConsoleView",
    "Page",
    "workflow_href",
]

#: A status record as kept, without its key.
STATUS_BYTES = 4096
#: Every finding revision kept for one workflow, together, without the key.
FINDINGS_BYTES = 16384
#: One finding revision as kept (past it the evidence list is left out).
REVISION_BYTES = 4096
#: The entry's own objects (slots, ints, list and dict slots), measured with
#: tracemalloc in tests/console/test_view.py.
ENTRY_OVERHEAD = 1024
#: Workflows per page of the list.
PAGE_SIZE = 500
DEFAULT_MAX_WORKFLOWS = 200_000
_SEVERITIES = {s.value: SEVERITY_RANK[s] for s in Severity}


#: Longest /w/ link written as the key itself (longer: ``~`` and the key's
#: SHA-256, since a request line has a limit).
MAX_HREF = 2048


def workflow_href(key: str) -> str:
    """The path of a workflow's page."""
    href = "/w/" + quote(key, safe="")
    return href if len(href) <= MAX_HREF else "/w/~" + sha256(key.encode()).hexdigest()


def _dumps(doc: Mapping[str, Any]) -> bytes:
    # A copy of exactly its length: orjson's own result keeps its larger
    # write buffer (7 KiB for a 1 KiB record, measured with tracemalloc).
    return bytes(memoryview(orjson.dumps(doc)))


def _fit_status(doc: dict[str, Any]) -> bytes:
    """The record without its key, its lists shortened to fit STATUS_BYTES."""
    body = {k: v for k, v in doc.items() if k != "workflow_key"}
    raw = _dumps(body)
    if len(raw) <= STATUS_BYTES:
        return raw
    lists = ("open", "cleared", "stale_epochs")
    full = {name: len(body.get(name) or ()) for name in lists}
    keep = max(full.values())
    while keep > 0:
        keep //= 2
        for name in lists:
            body[name] = list(body.get(name) or ())[:keep]
        body["trimmed"] = {n: full[n] - len(body[n]) for n in lists}
        raw = _dumps(body)
        if len(raw) <= STATUS_BYTES:
            return raw
    # Still too large: the scalar strings (a worker id is at most 256 chars
    # in a valid event, but the topic is not ours to trust).
    for name in ("current_worker",):
        if isinstance(body.get(name), str):
            body[name] = body[name][:256]
    raw = _dumps(body)
    return raw if len(raw) <= STATUS_BYTES else _dumps({"trimmed": {"record": True}})


def _fit_revision(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != "workflow_key"}
    raw = _dumps(body)
    if len(raw) <= REVISION_BYTES:
        return raw
    body["evidence"] = None
    body["trimmed"] = True
    raw = _dumps(body)
    if len(raw) <= REVISION_BYTES:
        return raw
    small = {k: body.get(k) for k in ("finding_id", "revision", "kind", "severity", "invalid")}
    small["trimmed"] = True
    return _dumps({k: (v[:512] if isinstance(v, str) else v) for k, v in small.items()})


class _Entry:
    __slots__ = ("cleared_n", "dropped", "open_n", "rank", "rev_bytes", "revisions", "status")

    def __init__(self) -> None:
        self.status: bytes | None = None
        self.rank = -1
        self.open_n = 0
        self.cleared_n = 0
        #: (finding_id, revision, record) in arrival order.
        self.revisions: list[tuple[str, int, bytes]] = []
        self.rev_bytes = 0
        self.dropped = 0


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the list: its rows (status records with their key),
    how many workflows matched, and the view's version."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    version: int


class ConsoleView:
    """Workflows by key, from the status records and finding revisions fed in."""

    def __init__(self, max_workflows: int = DEFAULT_MAX_WORKFLOWS) -> None:
        self.max_workflows = max_workflows
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._entries: dict[str, _Entry] = {}
        self._order: list[str] | None = []
        self.version = 0
        self.refused = 0
        self.invalid = 0
        self.last_invalid: str | None = None

    # -- writing (the followers) ---------------------------------------------

    def _entry(self, key: str) -> _Entry | None:
        e = self._entries.get(key)
        if e is None:
            if len(self._entries) >= self.max_workflows:
                self.refused += 1
                return None
            e = self._entries[key] = _Entry()
        return e

    def reject(self, reason: str) -> None:
        """A record that is not what its topic should hold: counted, kept out."""
        with self._lock:
            self.invalid += 1
            self.last_invalid = reason[:300]

    def put_status(self, key: str, doc: dict[str, Any] | None) -> None:
        """The latest status record of ``key`` (None: a tombstone); a record
        with values no page can show is kept as invalid (see the module)."""
        if doc is not None:
            doc = check_status(doc)
        with self._lock:
            if doc is None:
                e = self._entries.get(key)
                if e is not None:
                    e.status, e.rank, e.open_n, e.cleared_n = None, -1, 0, 0
                    if not e.revisions:
                        del self._entries[key]
                self._changed()
                return
            entry = self._entry(key)
            if entry is None:
                return
            worst = doc.get("worst_open")
            rank = _SEVERITIES.get(worst, -1) if isinstance(worst, str) else -1
            open_n = len(doc.get("open") or ())
            # The order is re-sorted only when a workflow moves (or arrives):
            # most status records change the stale epochs' freshness only.
            moved = entry.status is None or (rank, open_n) != (entry.rank, entry.open_n)
            entry.rank, entry.open_n = rank, open_n
            entry.cleared_n = len(doc.get("cleared") or ())
            entry.status = _fit_status(doc)
            self._changed(reorder=moved)

    def put_finding(self, doc: dict[str, Any]) -> None:
        """One finding revision (a repeat of a kept revision is ignored); a
        revision with values no page can show is kept as invalid. Its
        ``workflow_key`` and ``finding_id`` must be strings and its
        ``revision`` an integer (ValueError otherwise: the caller rejects it)."""
        key, fid, rev = doc["workflow_key"], doc["finding_id"], doc["revision"]
        if type(key) is not str or type(fid) is not str or type(rev) is not int:
            raise ValueError(
                "workflow_key and finding_id must be strings and revision an integer, got "
                f"{type(key).__name__}, {type(fid).__name__} and {type(rev).__name__}"
            )
        doc = check_finding(doc)
        with self._lock:
            entry = self._entry(key)
            if entry is None:
                return
            new = entry.status is None and not entry.revisions
            if any(f == fid and r == rev for f, r, _ in entry.revisions):
                return
            raw = _fit_revision(doc)
            entry.revisions.append((fid, rev, raw))
            entry.rev_bytes += len(raw)
            while entry.rev_bytes > FINDINGS_BYTES and len(entry.revisions) > 1:
                self._drop_one(entry)
            self._changed(reorder=new)

    @staticmethod
    def _drop_one(entry: _Entry) -> None:
        latest: dict[str, int] = {}
        for fid, rev, _ in entry.revisions:
            latest[fid] = max(rev, latest.get(fid, rev))
        idx = next((i for i, (fid, rev, _) in enumerate(entry.revisions) if rev < latest[fid]), 0)
        _, _, raw = entry.revisions.pop(idx)
        entry.rev_bytes -= len(raw)
        entry.dropped += 1

    def _changed(self, *, reorder: bool = True) -> None:
        self.version += 1
        if reorder:
            self._order = None
        self._cond.notify_all()

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until the version passes ``seen`` (or ``timeout``); the version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen, timeout)
            return self.version

    # -- reading (the HTTP threads) ------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def used_bytes(self) -> int:
        """What the bound counts: keys, kept records and the fixed overhead."""
        with self._lock:
            return sum(
                len(k.encode()) + len(e.status or b"") + e.rev_bytes + ENTRY_OVERHEAD
                for k, e in self._entries.items()
            )

    def _sorted(self) -> list[str]:
        if self._order is None:
            es = self._entries
            self._order = sorted(es, key=lambda k: (-es[k].rank, -es[k].open_n, k))
        return self._order

    def page(self, *, prefix: str = "", min_severity: str | None = None, page: int = 1) -> Page:
        """Worst first (worst open severity, then open count, then key);
        ``min_severity``: only workflows whose worst open finding is at least
        that severe (``"open"``: any open finding)."""
        floor = 0 if min_severity == "open" else _SEVERITIES.get(min_severity or "", -1)
        with self._lock:
            order = self._sorted()
            es = self._entries
            keys = (
                order
                if not prefix and floor < 0
                else [k for k in order if es[k].rank >= floor and k.startswith(prefix)]
            )
            pages = max(1, -(-len(keys) // PAGE_SIZE))
            page = min(max(1, page), pages)
            chosen = keys[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
            rows = [self._row(k, self._entries[k]) for k in chosen]
            return Page(rows, len(keys), page, pages, self.version)

    @staticmethod
    def _row(key: str, e: _Entry) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(e.status) if e.status is not None else {}
        doc["workflow_key"] = key
        doc["href"] = workflow_href(key)
        doc["open_count"] = e.open_n
        doc["cleared_count"] = e.cleared_n
        doc["finding_revisions"] = len(e.revisions)
        return doc

    def workflow(self, key: str) -> dict[str, Any] | None:
        """The status record and every kept revision of each finding (oldest
        first), or None when the view does not hold the key."""
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                return None
            status = self._row(key, e) if e.status is not None else None
            by_id: dict[str, list[dict[str, Any]]] = {}
            for fid, _rev, raw in e.revisions:
                doc = orjson.loads(raw)
                doc["workflow_key"] = key
                by_id.setdefault(fid, []).append(doc)
            dropped = e.dropped
        findings: list[dict[str, Any]] = [
            {"finding_id": fid, "revisions": sorted(revs, key=lambda d: int(d["revision"]))}
            for fid, revs in by_id.items()
        ]
        return {"status": status, "findings": findings, "dropped_revisions": dropped}

    def all_keys(self) -> list[str]:
        with self._lock:
            return list(self._entries)
