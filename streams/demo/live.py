"""``fencewatch demo live``: the SPEC §5 reference fixture through a real
broker and the live processor, findings read back from the findings topic.

Steps: start ``fencewatch run`` on run-unique topics; publish
``examples/reference.jsonl`` keyed by workflow key (idempotent producer);
wait until the processor has committed every event (its offsets commit in the
same transactions as its findings); read the findings topic with
``read_committed``; check that they are exactly the four of SPEC §5 and that
an offline audit of the same events topic agrees.
"""

from __future__ import annotations

from pathlib import Path

from streams.demo import kafka_io
from streams.demo.findings import check_reference
from streams.demo.session import DemoError, DemoSession, DemoSettings, Output
from streams.fixtures import reference_fixture

__all__ = ["default_fixture", "run_live"]


def default_fixture() -> Path:
    """The reference fixture shipped in the package (or a checkout's ``examples/``)."""
    return reference_fixture()


def run_live(settings: DemoSettings, out: Output, *, fixture: Path | None = None) -> bool:
    """Run the demo; True when the findings are the expected ones. Raises
    DemoError (or another FencewatchError) when it cannot run to its end."""
    try:
        path = fixture or default_fixture()
    except FileNotFoundError as exc:
        raise DemoError(str(exc)) from None
    try:
        records = kafka_io.jsonl_records(path)
    except OSError as exc:
        raise DemoError(f"cannot read the fixture {path}: {exc.strerror or exc}") from None
    with DemoSession(settings, "live", out) as s:
        s.start_processor()
        n = kafka_io.publish(settings.bootstrap_servers, s.events_topic, records)
        s.say(f"published {n} events from {path.name}, keyed by workflow_key")
        findings = s.show_findings()
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
