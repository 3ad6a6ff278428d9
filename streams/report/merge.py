"""Merge the JSON reports of shards of one topic audit (each read some of the
topic's partitions: ``fencewatch audit --topic T --partitions ...``) into the
report one audit of all their partitions writes (``fencewatch report merge``).

A workflow key lives in one partition, so shards share no key: the findings,
health entries and invalid records are the shards' together, in report
order; the counts add up; a sink's fence coverage is the sum of its counts
in each shard. What a shard read (its ``"source"``: partitions, bounds,
detector settings, version) says whether the shards fit together:
:class:`MergeRefused` names the first reason they do not.

The result renders as JSON and text exactly as the single audit's report
would; not as HTML, whose timelines need the evidence a JSON report does
not carry.

Bound: invalid records are listed up to the replay's limit
(:data:`~streams.core.replay.DEFAULT_MAX_INVALID_KEPT`), in (partition,
offset) order; past it a single audit keeps the first to arrive, so the
lists (not the counts) may differ there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.core.destinations import Destination, Verdict
from streams.core.findings import Evidence, Finding
from streams.core.health import Health
from streams.core.records import SEVERITY_RANK, Severity
from streams.core.replay import DEFAULT_MAX_INVALID_KEPT, Invalid, sort_findings
from streams.errors import MergeRefused
from streams.report.coverage import Coverage, MissingHistory
from streams.report.source import Source

__all__ = ["MergeRefused", "Merged", "MergedReport", "merge_reports"]

#: The summary's counts that add up across shards, in the report's order
#: (:meth:`~streams.core.replay.Replay.summary`).
_ADDED = (
    "records",
    "events",
    "invalid",
    "redeliveries_dropped",
    "workflows",
    "workflows_with_findings",
    "findings",
    "finding_revisions",
    "findings_open",
    "findings_cleared",
)
_ADDED_LATER = ("evidence_evicted", "late_beyond_horizon")
_VERDICT_ORDER = {v: i for i, v in enumerate(Verdict)}


class MergedReport:
    """The shards' results, read as :class:`~streams.report.data.ReportData`."""

    def __init__(
        self,
        findings: list[Finding],
        health: Mapping[str, Health],
        destinations: list[Destination],
        invalid: list[Invalid],
        counts: Mapping[str, Any],
    ) -> None:
        self._findings = sort_findings(findings)
        self._health = health
        self._destinations = destinations
        self.invalid = invalid
        self._counts = dict(counts)
        self.records = int(self._counts["records"])
        self.invalid_count = int(self._counts["invalid"])

    def latest_findings(self) -> list[Finding]:
        return list(self._findings)

    def health(self) -> list[Health]:
        return [self._health[f.finding_id] for f in self._findings]

    def destinations(self) -> list[Destination]:
        return list(self._destinations)

    def summary(self, health: list[Health] | None = None) -> dict[str, Any]:
        return dict(self._counts)

    def worst_severity(self) -> Severity | None:
        if not self._findings:
            return None
        return max((f.severity for f in self._findings), key=SEVERITY_RANK.__getitem__)


@dataclass(frozen=True, slots=True)
class Merged:
    """The merge: the report's data, what it covers, and what was read."""

    report: MergedReport
    coverage: Coverage | None
    source: Source

    @property
    def partial(self) -> bool:
        return self.coverage is not None and self.coverage.partial is not None


def merge_reports(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> Merged:
    """Merge ``(name, parsed JSON report)`` pairs, ``name`` being what the
    refusal names (the file). Raises :class:`MergeRefused`."""
    if not docs:
        raise MergeRefused("no report to merge")
    shards = [(name, _source(name, doc)) for name, doc in docs]
    source = _merge_sources(shards)
    findings: list[Finding] = []
    health: dict[str, Health] = {}
    sinks: dict[str, list[int]] = {}
    invalid: list[Invalid] = []
    counts: dict[str, Any] = dict.fromkeys(_ADDED, 0)
    by_kind: dict[str, int] = {}
    by_sev: dict[str, int] = {}
    late: dict[str, int] = dict.fromkeys(_ADDED_LATER, 0)
    partial: list[str] = []
    missing: list[MissingHistory] = []
    for name, doc in docs:
        if "what_if" in doc:
            raise MergeRefused(f"{name}: a report with --what-if-fenced does not merge")
        try:
            findings.extend(Finding.from_dict(f) for f in doc["findings"])
            for h in doc["health"]:
                health[h["finding_id"]] = _health(h)
            for d in doc["destinations"]:
                t = sinks.setdefault(d["sink"], [0, 0, 0])
                t[0] += int(d["stale_rejected"])
                t[1] += int(d["stale_committed"])
                t[2] += int(d["current_committed"])
            invalid.extend(
                Invalid(i["source"], int(i["offset"]), i["field"], i["reason"], i.get("line"))
                for i in doc["invalid"]
            )
            s = doc["summary"]
            for k in _ADDED:
                counts[k] += int(s[k])
            for k in _ADDED_LATER:
                late[k] += int(s[k])
            for k, n in s["by_kind"].items():
                by_kind[k] = by_kind.get(k, 0) + int(n)
            for k, n in s["by_severity"].items():
                by_sev[k] = by_sev.get(k, 0) + int(n)
            if s.get("partial") and s.get("partial_reason") not in partial:
                partial.append(str(s.get("partial_reason")))
            for m in s.get("missing_history", {}).get("partitions", []):
                missing.append(
                    MissingHistory(
                        source.topic,
                        int(m["partition"]),
                        int(m["from_offset"]),
                        int(m["log_start_offset"]),
                        int(m["missing"]),
                    )
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MergeRefused(f"{name}: not a JSON audit report ({_what(exc)})") from None
    ids = [f.finding_id for f in findings]
    if len(set(ids)) != len(ids):
        raise MergeRefused("the reports share a finding: they are not shards of one audit")
    invalid.sort(key=_invalid_order)
    counts["by_kind"] = dict(sorted(by_kind.items()))
    counts["by_severity"] = dict(sorted(by_sev.items()))
    dests = [Destination(sink, *t) for sink, t in sinks.items()]
    dests.sort(key=lambda d: (_VERDICT_ORDER[d.verdict], d.sink))
    report = MergedReport(
        findings,
        health,
        dests,
        invalid[:DEFAULT_MAX_INVALID_KEPT],
        _ordered(findings, counts, late),
    )
    coverage = None
    if partial or missing:
        nexts = {p: r for p, (_b, r) in source.bounds.items()} if partial else None
        coverage = Coverage(
            partial="; ".join(partial) if partial else None,
            next_offsets=nexts,
            missing=tuple(sorted(missing, key=lambda m: m.partition)),
            keys=dict(source.history_keys),
        )
    return Merged(report, coverage, source)


def _ordered(
    findings: list[Finding], counts: dict[str, Any], late: dict[str, int]
) -> dict[str, Any]:
    """The summary's counts in :meth:`Replay.summary`'s order (the JSON is
    compared byte for byte)."""
    sevs = [f.severity for f in findings]
    worst = max(sevs, key=SEVERITY_RANK.__getitem__) if sevs else None
    out = {k: counts[k] for k in _ADDED}
    out["by_kind"] = counts["by_kind"]
    out["by_severity"] = counts["by_severity"]
    out["worst_severity"] = None if worst is None else worst.value
    out.update(late)
    return out


def _source(name: str, doc: Mapping[str, Any]) -> Source:
    if not isinstance(doc, Mapping) or "findings" not in doc:
        raise MergeRefused(f"{name}: not a JSON audit report (fencewatch audit --format json)")
    raw = doc.get("source")
    if raw is None:
        raise MergeRefused(
            f'{name}: no "source" in the report: only a topic audit\'s JSON report from '
            "a fencewatch with `report merge` says what it read, to be merged"
        )
    try:
        return Source.from_dict(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MergeRefused(f"{name}: its source is malformed ({_what(exc)})") from None


def _merge_sources(shards: list[tuple[str, Source]]) -> Source:
    """One source for all the shards, or :class:`MergeRefused` naming the
    first pair that disagrees or overlaps."""
    first_name, first = shards[0]
    bounds: dict[int, tuple[int, int]] = {}
    owner: dict[int, str] = {}
    keys: dict[str, int] = {}
    start, end = first.start, first.end
    names = [name for name, _ in shards]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise MergeRefused(f"{twice} is given twice: shards must not overlap")
    for name, s in shards:
        for what, mine, theirs in (
            ("topics", s.topic, first.topic),
            ("detector settings", s.settings, first.settings),
            ("fencewatch versions", s.version, first.version),
        ):
            if mine != theirs:
                raise MergeRefused(
                    f"{first_name} and {name} are audits with different {what} "
                    f"({_show(theirs)} and {_show(mine)})"
                )
        start = _merge_bound("start", start, s.start, first_name, name)
        end = _merge_bound("end", end, s.end, first_name, name)
        for p, b in s.bounds.items():
            if p in owner:
                raise MergeRefused(
                    f"partition {p} of {s.topic} is in both {owner[p]} and {name}: "
                    "shards must not overlap"
                )
            owner[p] = name
            bounds[p] = b
        keys.update(s.history_keys)
    return Source(
        first.topic,
        dict(sorted(bounds.items())),
        start,
        end,
        first.settings,
        first.version,
        keys,
    )


def _merge_bound(which: str, acc: Any, new: Any, first: str, name: str) -> Any:
    """Equal bounds; per-partition offsets (each shard names its own) are joined."""
    if isinstance(acc, dict) and isinstance(new, dict) and "offsets" in acc and "offsets" in new:
        return {"offsets": dict(sorted({**acc["offsets"], **new["offsets"]}.items(), key=_num))}
    if acc != new:
        raise MergeRefused(
            f"{first} and {name} were read with different {which} bounds "
            f"({_show(acc)} and {_show(new)}): their bounds do not fit one audit"
        )
    return acc


def _num(item: tuple[str, Any]) -> int:
    return int(item[0])


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    return str(value)


def _what(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def _health(h: Mapping[str, Any]) -> Health:
    return Health(
        h["finding_id"],
        h["workflow_key"],
        h["status"],
        h["fenced"],
        _evidence(h["fenced_by"]),
        _evidence(h["verified_by"]),
    )


def _evidence(doc: Mapping[str, Any] | None) -> Evidence | None:
    if doc is None:
        return None
    return Evidence(
        int(doc["position"]),
        int(doc["epoch"]),
        doc["worker_id"],
        doc["type"],
        doc["effect_key"],
    )


def _invalid_order(inv: Invalid) -> tuple[int, int]:
    # As streams.audit.topic.invalid_order (not imported: the audit layer
    # imports the reports, not the other way round).
    return int(inv.source.rpartition("/")[2]), inv.offset
