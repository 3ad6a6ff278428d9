"""``fencewatch demo live``: the SPEC §5 reference fixture through a real
broker and the live processor, findings read back from the findings topic.

Steps: start ``fencewatch run`` on run-unique topics; publish
``examples/reference.jsonl`` keyed by workflow key (idempotent producer);
wait until the processor has committed every event (its offsets commit in the
same transactions as its findings); read the findings topic with
``read_committed``; check that they are exactly the four of SPEC §5 and that
an offline audit of the same events topic agrees.

With ``--fixture FILE`` (any JSON Lines file) the expectation is not SPEC §5
but the product's own file audit of that file: the same findings (id, kind,
severity, raising seq) and as many dead letters as it has invalid lines.
"""

from __future__ import annotations

from pathlib import Path

from streams.core.findings import Finding
from streams.core.replay import Replay
from streams.demo import kafka_io
from streams.demo.expected import check_reference
from streams.demo.session import DemoError, DemoSession, DemoSettings, Output
from streams.fixtures import reference_fixture

__all__ = ["check_against_audit", "default_fixture", "file_audit", "run_live"]


def default_fixture() -> Path:
    """The reference fixture shipped in the package (or a checkout's ``examples/``)."""
    return reference_fixture()


def file_audit(path: Path) -> Replay:
    """What ``fencewatch audit FILE`` finds in ``path`` (the same detector)."""
    replay = Replay()
    with path.open("rb") as fh:
        replay.feed_stream(fh.read, source=str(path))
    return replay


def _identity(f: Finding) -> tuple[str, str, str, str, int | None]:
    # Positions without seq differ (a line number in the file, an offset on the
    # topic); ids, kinds, severities and seqs do not.
    return (f.workflow_key, f.kind.value, f.finding_id, f.severity.value, f.event_seq)


def check_against_audit(live: list[Finding], audit: Replay, dead_letters: int) -> list[str]:
    """Problems (empty when none) with live findings expected to equal the file audit's."""
    want = {_identity(f) for f in audit.latest_findings()}
    got = {_identity(f) for f in live}
    problems = [
        f"missing {k} {kind} {fid} (seq {seq})"
        for k, kind, fid, _, seq in sorted(want - got, key=str)
    ]
    problems += [
        f"unexpected {k} {kind} {fid} (seq {seq})"
        for k, kind, fid, _, seq in sorted(got - want, key=str)
    ]
    if dead_letters != audit.invalid_count:
        problems.append(
            f"{dead_letters} event(s) in the dead-letter topic; the file audit found "
            f"{audit.invalid_count} invalid line(s)"
        )
    return problems


def run_live(settings: DemoSettings, out: Output, *, fixture: Path | None = None) -> bool:
    """Run the demo; True when the findings are the expected ones. Raises
    DemoError (or another FencewatchError) when it cannot run to its end.

    Without ``fixture`` the expectation is SPEC §5's; with one, the file
    audit of that fixture's."""
    try:
        path = fixture or default_fixture()
    except FileNotFoundError as exc:
        raise DemoError(str(exc)) from None
    try:
        records = kafka_io.jsonl_records(path)
        expected = file_audit(path) if fixture is not None else None
    except OSError as exc:
        raise DemoError(f"cannot read the fixture {path}: {exc.strerror or exc}") from None
    with DemoSession(settings, "live", out) as s:
        s.start_processor()
        n = kafka_io.publish(settings.connection, s.events_topic, records)
        s.say(f"published {n} events from {path.name}, keyed by workflow_key")
        findings = s.show_findings()
        if expected is not None:
            n_found = len(expected.latest_findings())
            return s.conclude(
                findings,
                check_against_audit(findings, expected, s.dead_letters()),
                f"as expected: the {n_found} finding{'s' if n_found != 1 else ''} of "
                f"`fencewatch audit {path.name}` and {expected.invalid_count} dead letter"
                f"{'s' if expected.invalid_count != 1 else ''} (its invalid lines); an offline "
                "audit of the events topic agrees",
            )
        problems = check_reference(findings)
        dead = s.dead_letters()
        if dead:
            problems.append(f"{dead} event(s) in the dead-letter topic")
        return s.conclude(
            findings,
            problems,
            "as expected (SPEC §5): stale_activity seq 6, stale_attempt seq 7, stale_commit "
            "seq 8, conflicting_commit seq 9, all on export-ledger; nothing on report-index or "
            "checkout-sync; no dead letters; an offline audit of the events topic agrees",
        )
