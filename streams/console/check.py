"""The console's check of each value it will show, per status record and
finding revision read from the topics.

The followers reject what is not a status record or a finding at all (not
JSON, a missing field, a key that is not its workflow's). What passes may
still hold a value no page can draw: ``updated_ms`` of 2^63-1 (no calendar
has that year: Python's ``datetime`` raises, JavaScript's ``Date`` is
invalid), a negative epoch, a list where a worker id should be. Such a
record is kept and shown as *invalid*, with the reasons: each bad value is
replaced by null (a list item that is not what the list holds is left out),
so that every page and the JSON API only ever see values of the right type
and range, and one bad record never takes the list or the workflow's page
down with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streams.core.records import MAX_INT63, Severity

__all__ = ["MAX_MS", "check_finding", "check_status"]

#: The latest time any page writes as a date: 9999-12-31T23:59:59.999Z
#: (Python's datetime stops at year 9999; JavaScript's Date goes further).
MAX_MS = 253_402_300_799_999
#: Reasons kept per record (the rest are counted), and characters of a value
#: quoted in one.
_MAX_REASONS = 5
_SHOWN = 40
_SEVERITIES = frozenset(s.value for s in Severity)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _int_problem(value: object, top: int, what: str) -> str | None:
    # bool is an int in Python, never in a record.
    if type(value) is not int:
        return f"must be {what}, got {_shown(value)}"
    if not 0 <= value <= top:
        return f"{_shown(value)} is out of range ({what})"
    return None


def _int63(value: object) -> str | None:
    return _int_problem(value, MAX_INT63, "an integer 0 ≤ n < 2^63")


def _ms(value: object) -> str | None:
    return _int_problem(value, MAX_MS, "milliseconds 0 to 253402300799999, up to year 9999")


def _string(value: object) -> str | None:
    return None if type(value) is str else f"must be a string, got {_shown(value)}"


def _bool(value: object) -> str | None:
    return None if type(value) is bool else f"must be true or false, got {_shown(value)}"


def _severity(value: object) -> str | None:
    if type(value) is str and value in _SEVERITIES:
        return None
    return f"must be a severity ({', '.join(sorted(_SEVERITIES))}), got {_shown(value)}"


_Check = Callable[[object], "str | None"]


class _Checker:
    """Collects the reasons while the record is cleaned."""

    __slots__ = ("count", "reasons")

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.count = 0

    def bad(self, where: str, reason: str) -> None:
        self.count += 1
        if len(self.reasons) < _MAX_REASONS:
            self.reasons.append(f"{where}: {reason}")

    def fields(
        self, doc: dict[str, Any], checks: Mapping[str, _Check], *, where: str = "", null: bool
    ) -> None:
        """Each named field of ``doc`` that fails its check becomes null
        (``null``: a null is a valid value of these fields)."""
        for name, check in checks.items():
            value = doc.get(name)
            if value is None and null:
                continue
            problem = check(value)
            if problem is not None:
                self.bad(where + name, problem)
                doc[name] = None

    def items(
        self, doc: dict[str, Any], name: str, checks: Mapping[str, _Check], *, null: frozenset[str]
    ) -> None:
        """A list of objects: each item with a bad field is left out (an item
        is one thing: its epoch without its worker would say something false)."""
        value = doc.get(name)
        if value is None:
            return
        if type(value) is not list:
            self.bad(name, f"must be a list, got {_shown(value)}")
            doc[name] = []
            return
        kept = []
        for i, item in enumerate(value):
            where = f"{name}[{i}]"
            if type(item) is not dict:
                self.bad(where, f"must be an object, got {_shown(item)}")
                continue
            problems = [
                (field, problem)
                for field, check in checks.items()
                if not (item.get(field) is None and field in null)
                and (problem := check(item.get(field))) is not None
            ]
            for field, problem in problems:
                self.bad(f"{where}.{field}", problem)
            if not problems:
                kept.append(item)
        doc[name] = kept

    def verdict(self) -> str | None:
        if not self.count:
            return None
        more = self.count - len(self.reasons)
        return "; ".join(self.reasons) + (f"; and {more} more" if more else "")


_STATUS_SCALARS: dict[str, _Check] = {
    "current_epoch": _int63,
    "current_worker": _string,
    "acquired_seq": _int63,
    "acquisition_implied": _bool,
    "released": _bool,
    "last_position": _int63,
    "worst_open": _severity,
    "updated_ms": _ms,
}
_STALE: dict[str, _Check] = {
    "epoch": _int63,
    "worker": _string,
    "events": _int63,
    "last_position": _int63,
    "last_seen_ms": _ms,
}
_REF: dict[str, _Check] = {
    "finding_id": _string,
    "kind": _string,
    "severity": _severity,
    "revision": _int63,
}


def check_status(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a status record (SPEC §8) whose every value can be shown:
    bad ones nulled or left out, and ``invalid`` saying which and why (absent
    when nothing was wrong)."""
    out = dict(doc)
    c = _Checker()
    c.fields(out, _STATUS_SCALARS, null=True)
    c.items(out, "stale_epochs", _STALE, null=frozenset({"last_seen_ms"}))
    c.items(out, "open", _REF, null=frozenset())
    c.items(out, "cleared", _REF, null=frozenset())
    verdict = c.verdict()
    if verdict is not None:
        out["invalid"] = verdict
    return out


_FINDING_SCALARS: dict[str, _Check] = {
    "stale_epoch": _int63,
    "stale_worker": _string,
    "current_epoch": _int63,
    "current_worker": _string,
    "transition_seq": _int63,
    "transition_implied": _bool,
    "event_type": _string,
    "event_seq": _int63,
    "event_offset": _int63,
    "effect_key": _string,
    "sink": _string,
    "sink_outcome": _string,
    "same_owner": _bool,
    "ordering": _string,
    "action": _string,
}
_EVIDENCE: dict[str, _Check] = {
    "position": _int63,
    "epoch": _int63,
    "worker_id": _string,
    "type": _string,
    "effect_key": _string,
}


def check_finding(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a finding revision (SPEC §4) whose every value can be
    shown, as :func:`check_status` does for a status record. Its identity
    (``finding_id``, ``revision``, ``workflow_key``) and its kind, severity
    and confidence are the findings consumer's to check (a record without
    them is not a finding)."""
    out = dict(doc)
    c = _Checker()
    c.fields(out, _FINDING_SCALARS, null=True)
    epochs = out.get("epochs")
    if epochs is not None and (
        type(epochs) is not list or any(_int63(e) is not None for e in epochs)
    ):
        c.bad("epochs", f"must be a list of integers 0 ≤ n < 2^63, got {_shown(epochs)}")
        out["epochs"] = None
    c.items(out, "evidence", _EVIDENCE, null=frozenset({"effect_key"}))
    verdict = c.verdict()
    if verdict is not None:
        out["invalid"] = verdict
    return out
