"""OpenTelemetry integration with the real opentelemetry-sdk and a real broker:
the identity on spans, spans forwarded as events, OTLP/JSON files audited."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streams.cli import main
from streams.core.records import Event
from streams.errors import LeaseLost
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.integrations import otel
from streams.integrations.otel import OtlpJsonFileExporter, OwnershipSpanProcessor
from streams.sdk import OwnershipReporter, ReporterSettings

from .conftest import replay_topic

KEY = "tenant/otel-export/2026-07-26"


def _fw(kind: str, epoch: int, worker: str, effect: str | None = None, **more: Any) -> dict:
    attrs: dict[str, Any] = {
        "fencewatch.event": kind,
        "fencewatch.workflow_key": KEY,
        "fencewatch.owner_epoch": epoch,
        "fencewatch.worker_id": worker,
    }
    if effect is not None:
        attrs["fencewatch.effect_key"] = effect
    attrs.update(more)
    return attrs


# The split-brain story as spans: beta takes over, alpha's late effect is refused.
STORY = [
    _fw("lease_acquired", 1, "alpha", **{"fencewatch.seq": 1}),
    _fw("progress", 1, "alpha", **{"fencewatch.seq": 2}),
    _fw("lease_acquired", 2, "beta", **{"fencewatch.seq": 3}),
    _fw("effect_attempted", 2, "beta", "release-index", **{"fencewatch.seq": 4}),
    _fw("effect_committed", 2, "beta", "release-index", **{"fencewatch.seq": 5}),
    _fw("effect_attempted", 1, "alpha", "release-index", **{"fencewatch.seq": 6}),
    _fw(
        "effect_rejected",
        1,
        "alpha",
        "release-index",
        **{"fencewatch.seq": 7, "fencewatch.sink": "ledger"},
    ),
]


@pytest.fixture
def memory_tracer() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument()
    yield provider.get_tracer("test"), exporter
    otel.uninstrument()
    provider.shutdown()


def test_sdk_puts_the_ownership_identity_on_the_current_span(
    memory_tracer: Any, kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """With instrument(), every event an owner reports sets workflow key, owner
    epoch, worker id (and effect key) on the current span, plus a span event
    with seq and the effect's risk; a lost owner's refused effect shows as
    effect_rejected with reason lease_lost."""
    tracer, exporter = memory_tracer
    db = open_database(f"sqlite:///{tmp_path / 'f.db'}")
    leases, sink = SqlLeaseStore(db), FencedSink(db, name="ledger")
    topic = unique_topic()
    with (
        OwnershipReporter(
            ReporterSettings(kafka_bootstrap, "alpha", topic=topic), leases=leases
        ) as r,
        r.own(KEY, ttl=30) as owner,
    ):
        with tracer.start_as_current_span("checkpoint"):
            owner.progress()
        with tracer.start_as_current_span("publish"):
            owner.effect(sink, "release-index", b"x", risk="irreversible")
        r.progress(KEY, owner.epoch)  # no current span: nothing to annotate, no error
        # beta takes over (alpha's lease let go under it); a checkpoint tells alpha.
        leases.release(KEY, owner.epoch, "alpha")
        leases.acquire(KEY, "beta", ttl=30)
        assert owner.progress() is False and owner.lost.is_set()
        with tracer.start_as_current_span("late"), pytest.raises(LeaseLost):
            owner.effect(sink, "late-index", b"y", risk="deferrable")
    db.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert dict(spans["checkpoint"].attributes or {}) == {
        "fencewatch.workflow_key": KEY,
        "fencewatch.owner_epoch": owner.epoch,
        "fencewatch.worker_id": "alpha",
    }
    pub = spans["publish"]
    assert (pub.attributes or {})["fencewatch.effect_key"] == "release-index"
    assert (pub.attributes or {})["fencewatch.owner_epoch"] == owner.epoch
    assert "fencewatch.event" not in (pub.attributes or {})  # the SDK already published it
    names = [e.name for e in pub.events]
    assert names == ["fencewatch.effect_attempted", "fencewatch.effect_committed"]
    assert (pub.events[0].attributes or {})["fencewatch.risk"] == "irreversible"
    seqs = [e.attributes["fencewatch.seq"] for e in pub.events]  # type: ignore[index]
    assert seqs == sorted(seqs) and len(set(seqs)) == 2
    (refused,) = spans["late"].events
    assert refused.name == "fencewatch.effect_rejected"
    assert {k: v for k, v in (refused.attributes or {}).items() if k != "fencewatch.seq"} == {
        "fencewatch.owner_epoch": owner.epoch,
        "fencewatch.risk": "deferrable",
        "fencewatch.receipt": "not_attempted",
        "fencewatch.reason": "lease_lost",
    }


def test_span_processor_forwards_evidence_spans_to_kafka_and_the_detector_sees_the_split_brain(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Spans carrying fencewatch.event become events on the topic (plain spans
    and invalid ones do not); the replay finds the rejected stale attempt."""
    topic = unique_topic()
    proc = OwnershipSpanProcessor.to_kafka(kafka_bootstrap, topic=topic)
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("plain work", attributes={"x": 1}):
        pass
    for i, attrs in enumerate(STORY):
        with tracer.start_as_current_span(f"step-{i}", attributes=attrs):
            pass
    bad = _fw("effect_attempted", 1, "alpha")  # no effect key
    with tracer.start_as_current_span("bad", attributes=bad):
        pass
    assert proc.force_flush(30_000)
    stats = proc.stats()
    provider.shutdown()
    assert (stats.forwarded, stats.invalid, stats.dropped, stats.failed) == (len(STORY), 1, 0, 0)
    assert "effect_key" in (stats.last_invalid or "")

    replay = replay_topic(kafka_bootstrap, topic)
    assert replay.invalid_count == 0 and replay.records == len(STORY)
    found = [(f.kind.value, f.stale_epoch, f.sink_outcome) for f in replay.latest_findings()]
    assert ("stale_attempt", 1, "rejected") in found
    assert not any(k == "stale_commit" for k, _, _ in found)


class _Held:
    """A publisher that holds the forwarding thread until released (to fill the
    processor's queue deterministically); records what it was given."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.got: list[Event] = []

    def publish(self, event: Event) -> None:
        self.entered.set()
        self.gate.wait(30)
        self.got.append(event)


def test_span_end_never_blocks_and_drops_past_the_queue_bound() -> None:
    """With the forwarder stuck, span end still returns; spans past the queue
    bound are dropped and counted, the queued ones are forwarded later."""
    held = _Held()
    proc = OwnershipSpanProcessor(held, max_queue=3)
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("agent")
    for i in range(10):
        with tracer.start_as_current_span(f"s{i}", attributes=_fw("progress", 1, "alpha")):
            pass
        if i == 0:
            assert held.entered.wait(10)  # the forwarder is now stuck in publish
    # One span is in the stuck forwarder, three wait in the queue, six dropped.
    mid = proc.stats()
    assert (mid.dropped, mid.queued, mid.forwarded) == (6, 4, 0)
    held.gate.set()
    assert proc.force_flush(10_000)
    end = proc.stats()
    assert (end.forwarded, end.dropped, end.queued) == (4, 6, 0) and len(held.got) == 4
    provider.shutdown()


def _export_story(path: Path) -> None:
    provider = TracerProvider()
    with path.open("wb") as fh:
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(fh)))
        tracer = provider.get_tracer("agent")
        with tracer.start_as_current_span("run"):
            for i, attrs in enumerate(STORY):
                with tracer.start_as_current_span(f"step-{i}", attributes=attrs):
                    pass
        bad = _fw("progress", 1, "alpha")
        bad["fencewatch.owner_epoch"] = "one"
        with tracer.start_as_current_span("bad epoch", attributes=bad):
            pass
        provider.shutdown()


def test_audit_otlp_reads_an_sdk_export_as_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fencewatch audit --otlp FILE` on spans exported by the real SDK: the
    stale attempt is found, the span with a string epoch is invalid, named."""
    path = tmp_path / "traces.jsonl"
    _export_story(path)
    code = main(["audit", "--format", "json", "--otlp", str(path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    kinds = [(f["kind"], f["stale_epoch"], f["sink_outcome"]) for f in doc["findings"]]
    assert ("stale_attempt", 1, "rejected") in kinds
    assert doc["summary"]["events"] == len(STORY)
    (inv,) = doc["invalid"]
    assert inv["field"] == "fencewatch.owner_epoch" and "bad epoch" in inv["reason"]
    assert inv["source"] == str(path) and inv["line"] >= 1


# One line as the OpenTelemetry Collector's file exporter writes it (pdata
# JSON: hex ids, intValue as a string), with a span of every kind of trouble.
COLLECTOR_LINE = {
    "resourceSpans": [
        {
            "resource": {
                "attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]
            },
            "scopeSpans": [
                {
                    "scope": {"name": "agent"},
                    "spans": [
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b174",
                            "name": "acquire",
                            "kind": 1,
                            "startTimeUnixNano": "1700000000000000000",
                            "endTimeUnixNano": "1700000000100000000",
                            "attributes": [
                                {
                                    "key": "fencewatch.event",
                                    "value": {"stringValue": "lease_acquired"},
                                },
                                {"key": "fencewatch.workflow_key", "value": {"stringValue": KEY}},
                                {"key": "fencewatch.owner_epoch", "value": {"intValue": "3"}},
                                {"key": "fencewatch.worker_id", "value": {"stringValue": "w1"}},
                            ],
                            "status": {},
                        },
                        {"spanId": "0000000000000001", "name": "not evidence", "attributes": []},
                        {
                            "spanId": "0000000000000002",
                            "name": "no worker",
                            "attributes": [
                                {"key": "fencewatch.event", "value": {"stringValue": "progress"}},
                                {"key": "fencewatch.workflow_key", "value": {"stringValue": KEY}},
                                {"key": "fencewatch.owner_epoch", "value": {"intValue": "3"}},
                            ],
                        },
                        {
                            "spanId": "0000000000000003",
                            "name": "weird value",
                            "attributes": [{"key": "a", "value": {"intValue": "x"}}],
                        },
                    ],
                }
            ],
        }
    ]
}


def test_audit_otlp_reads_the_collector_file_format_and_names_bad_lines_and_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Collector-format lines: the valid span is an event; a span missing its
    worker, an undecodable attribute and a non-OTLP line are invalid with reasons."""
    path = tmp_path / "collector.jsonl"
    path.write_text(json.dumps(COLLECTOR_LINE) + "\n\n" + '{"hello": 1}\n')
    code = main(["audit", "--format", "json", "--otlp", str(path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["findings"] == []
    assert doc["summary"]["events"] == 1
    reasons = [(i["line"], i["field"], i["reason"]) for i in doc["invalid"]]
    assert len(reasons) == 3
    assert reasons[0][0] == 1 and reasons[0][1] == "fencewatch.worker_id"
    assert "'no worker'" in reasons[0][2]
    assert reasons[1][0] == 1 and "'weird value'" in reasons[1][2]
    assert reasons[2][0] == 3 and "resourceSpans" in reasons[2][2]


def test_audit_otlp_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--otlp with PATHs is a usage error; a missing file is unreadable input (2)."""
    assert main(["audit", "--otlp", str(tmp_path / "x"), str(tmp_path / "y")]) == 2
    assert "one input" in capsys.readouterr().err
    assert main(["audit", "--otlp", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_otel_example_writes_a_trace_file_the_audit_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/otel_spans.py runs (file output only) and its trace file audits
    to the rejected stale attempt it describes."""
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples" / "otel_spans.py"
    out = tmp_path / "traces.jsonl"
    subprocess.run([sys.executable, str(example), "--otlp-out", str(out)], check=True, timeout=120)
    assert main(["audit", "--format", "json", "--otlp", str(out)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["sink_outcome"]) for f in doc["findings"]] == [
        ("stale_attempt", "rejected")
    ]


def test_audit_otlp_ids_are_case_insensitive_hex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same spans exported once with upper-case ids (as in the OTLP/JSON
    spec's example) and once with lower-case ids (the collector, the SDK) are
    one set of events: the second copy is dropped as redelivered, even without
    fencewatch.seq."""
    line = json.loads(json.dumps(COLLECTOR_LINE))
    (first, *_) = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    line["resourceSpans"][0]["scopeSpans"][0]["spans"] = [first]
    upper = json.loads(json.dumps(line))
    span = upper["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["traceId"], span["spanId"] = span["traceId"].upper(), span["spanId"].upper()
    assert span["traceId"] != first["traceId"]
    (tmp_path / "lower.jsonl").write_text(json.dumps(line) + "\n")
    (tmp_path / "upper.jsonl").write_text(json.dumps(upper) + "\n")
    argv = ["audit", "--format", "json"]
    argv += ["--otlp", str(tmp_path / "upper.jsonl"), "--otlp", str(tmp_path / "lower.jsonl")]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert (summary["events"], summary["redeliveries_dropped"], summary["invalid"]) == (2, 1, 0)


def _audit_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(["audit", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_audit_otlp_reads_pretty_printed_documents_as_their_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK export re-written as `jq .` would (one indented document per
    export, a BOM and a blank line first) audits to the same findings,
    summary and invalid fields as the JSON Lines file."""
    lines = tmp_path / "traces.jsonl"
    _export_story(lines)
    docs = [json.loads(x) for x in lines.read_text().splitlines() if x.strip()]
    assert len(docs) > 1
    pretty = tmp_path / "traces.json"
    pretty.write_text("\ufeff\n" + "".join(json.dumps(d, indent=2) + "\n" for d in docs))
    code_l, by_lines = _audit_json(["--otlp", str(lines)], capsys)
    code_p, by_docs = _audit_json(["--otlp", str(pretty)], capsys)
    assert code_l == code_p == 1
    assert by_docs["findings"] == by_lines["findings"]
    assert by_docs["summary"] == by_lines["summary"]
    assert [i["field"] for i in by_docs["invalid"]] == [i["field"] for i in by_lines["invalid"]]
    # Each invalid span names the line its document starts on.
    starts = [1 + 1]  # the BOM line is blank, the first document starts on line 2
    for d in docs[:-1]:
        starts.append(starts[-1] + json.dumps(d, indent=2).count("\n") + 1)
    assert all(i["line"] in starts for i in by_docs["invalid"])


def test_audit_otlp_reads_one_pretty_printed_document_or_a_list_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A single indented TracesData, and a JSON array of them, give the
    collector line's event and its two invalid spans."""
    one = tmp_path / "one.json"
    one.write_text(json.dumps(COLLECTOR_LINE, indent=2))
    many = tmp_path / "many.json"
    many.write_text(json.dumps([COLLECTOR_LINE], indent=4))
    for path in (one, many):
        code, doc = _audit_json(["--otlp", str(path)], capsys)
        assert code == 0 and doc["summary"]["events"] == 1
        assert [(i["line"], i["field"]) for i in doc["invalid"]] == [
            (1, "fencewatch.worker_id"),
            (1, None),
        ]


def test_a_malformed_pretty_printed_document_keeps_the_documents_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A document that does not parse is one invalid record naming its line;
    the evidence of the documents before it stays."""
    good = json.dumps(COLLECTOR_LINE, indent=2)
    path = tmp_path / "cut.json"
    path.write_text(good + "\n" + good[: len(good) // 2])
    code, doc = _audit_json(["--otlp", str(path)], capsys)
    assert code == 0 and doc["summary"]["events"] == 1
    last = doc["invalid"][-1]
    assert last["line"] == good.count("\n") + 2
    assert "malformed JSON at line" in last["reason"]


def test_a_pretty_printed_file_over_the_bound_is_one_invalid_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_DOCUMENT_BYTES a pretty-printed file is not decoded: one invalid
    record says to write JSON Lines; a JSON Lines file of that size is read."""
    from streams.integrations import otlp

    monkeypatch.setattr(otlp, "MAX_DOCUMENT_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(COLLECTOR_LINE, indent=2))
    assert path.stat().st_size > 1000
    assert main(["audit", "--otlp", str(path)]) == 2  # no valid event at all
    err = capsys.readouterr().err
    assert "larger than 1,000 bytes: write it as JSON Lines" in err and err.count("\n") == 1
    path.write_text(json.dumps(COLLECTOR_LINE) + "\n")
    code, doc = _audit_json(["--otlp", str(path)], capsys)
    assert code == 0 and doc["summary"]["events"] == 1 and len(doc["invalid"]) == 2
