"""Which findings a reader wants, and which revisions it has already seen.

Pure: no Kafka, no clock. Used by the consumer API and ``fencewatch findings``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import msgspec
import orjson

from streams.core.findings import Evidence, Finding
from streams.core.records import SEVERITY_RANK, Kind, Severity
from streams.errors import NotAFinding

__all__ = [
    "DEFAULT_MAX_TRACKED",
    "FindingFilter",
    "NotAFinding",
    "RevisionTracker",
    "decode_finding",
    "decode_finding_body",
    "encode_finding",
]

#: Finding ids whose highest delivered revision is remembered (see RevisionTracker).
DEFAULT_MAX_TRACKED = 100_000


class _StrictEvidence(Evidence, frozen=True, gc=False, forbid_unknown_fields=True):
    """Evidence that refuses keys it does not know, as ``Evidence(**doc)`` does."""


class _EvidenceKeys(msgspec.Struct):
    """Only a record's evidence, to check its keys (the rest is skipped)."""

    evidence: list[_StrictEvidence]


_FINDING = msgspec.json.Decoder(Finding)
_EVIDENCE_KEYS = msgspec.json.Decoder(_EvidenceKeys)
_ENCODER = msgspec.json.Encoder()


def decode_finding(value: bytes | None) -> Finding:
    """The finding in a record value; raises :class:`NotAFinding` saying why not.

    A record as the processor writes it is decoded straight into the typed
    record (msgspec, ~2 µs against ~9 µs for orjson and ``Finding.from_dict``:
    at 2,000 findings/s the follower's largest cost after batching). msgspec
    is the stricter of the two (exact types, every field present), so what it
    takes ``from_dict`` takes the same way, but for unknown keys in an
    evidence entry, checked apart; anything else (a record written before
    ``confidence`` existed, loose types, not a finding) takes the general
    path, with its answers and messages."""
    return decode_finding_body(value, encode=False)[0]


def decode_finding_body(
    value: bytes | None, *, encode: bool = True
) -> tuple[Finding, bytes | None]:
    """:func:`decode_finding`, and the finding's JSON as :func:`encode_finding`
    writes it (None when not ``encode``): what the follower prints and posts.

    A record as the processor writes it *is* those bytes (``to_json``), so
    the encoding is compared with the record, and when they are equal the
    record's own bytes are the body and the strict pass over its evidence is
    skipped: bytes that equal the encoding of the decoded finding hold no key
    it does not know, anywhere. The follower decoded each finding twice
    (once for the finding, once for its evidence's keys) and encoded it twice
    (the jsonl line, the webhook body): now once each (~2 CPU µs less per
    finding; docs/performance.md, the follower section)."""
    if not value:
        raise NotAFinding("empty record")
    try:
        finding = _FINDING.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    else:
        body = _ENCODER.encode(finding) if encode else None
        if body is not None and body == value:
            return finding, value
        try:
            _EVIDENCE_KEYS.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        else:
            return finding, body
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise NotAFinding(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise NotAFinding(f"a JSON {type(doc).__name__}, not an object")
    try:
        finding = Finding.from_dict(doc)
    except KeyError as exc:
        raise NotAFinding(f"{exc.args[0]}: is required") from None
    except (TypeError, ValueError) as exc:
        raise NotAFinding(str(exc)) from None
    return finding, _ENCODER.encode(finding) if encode else None


def encode_finding(f: Finding) -> bytes:
    """``f.to_json()``, byte for byte (the same keys in the same order, the
    same escapes), in ~1 µs against ~4 µs: the follower encodes each finding
    for its output and for the webhook body."""
    return _ENCODER.encode(f)


@dataclass(frozen=True, slots=True)
class FindingFilter:
    """Keep findings at or above ``min_severity``, of one of ``kinds`` (all
    when empty), of one of ``workflows`` or starting with ``prefix`` (all
    when both are empty/None; either matching is enough)."""

    min_severity: Severity | None = None
    kinds: frozenset[Kind] = frozenset()
    workflows: frozenset[str] = frozenset()
    prefix: str | None = None

    def accepts(self, f: Finding) -> bool:
        if (
            self.min_severity is not None
            and SEVERITY_RANK[f.severity] < SEVERITY_RANK[self.min_severity]
        ):
            return False
        if self.kinds and f.kind not in self.kinds:
            return False
        if self.workflows or self.prefix is not None:
            by_key = f.workflow_key in self.workflows
            by_prefix = self.prefix is not None and f.workflow_key.startswith(self.prefix)
            return by_key or by_prefix
        return True


class RevisionTracker:
    """The highest revision delivered per finding id, for at most
    ``max_tracked`` ids (least recently delivered forgotten first).

    At the bound: a forgotten id is treated as never seen, so a later record
    of it (a redelivered old revision, in practice only after an
    at-least-once processor restart) is delivered again: a duplicate the
    handler's idempotency key (``finding_id/revision``) absorbs, never a loss.
    ``forgotten`` counts the evictions."""

    def __init__(self, max_tracked: int = DEFAULT_MAX_TRACKED) -> None:
        if max_tracked < 1:
            raise ValueError("max_tracked must be >= 1")
        self.max_tracked = max_tracked
        self._seen: OrderedDict[str, int] = OrderedDict()
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._seen)

    def previous(self, finding_id: str) -> int | None:
        return self._seen.get(finding_id)

    def offer(self, finding_id: str, revision: int) -> tuple[bool, int | None]:
        """``(new, previous)``: ``new`` when ``revision`` is higher than every
        revision delivered for the id (it is then recorded); ``previous`` is
        the highest delivered before, or None."""
        seen = self._seen
        prev = seen.get(finding_id)
        if prev is not None:
            if revision <= prev:
                return False, prev
            seen[finding_id] = revision
            seen.move_to_end(finding_id)
            return True, prev
        # A new id goes in last already: no move_to_end (one call less per
        # finding on the follower's usual path).
        seen[finding_id] = revision
        if len(seen) > self.max_tracked:
            seen.popitem(last=False)
            self.forgotten += 1
        return True, None
