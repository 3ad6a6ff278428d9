"""Replay.feed_stream: JSON Lines read in chunks, with bounded memory."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from streams.core.replay import Replay

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _audit(data: bytes, *, chunk: int, max_bytes: int = 64 * 1024) -> Replay:
    replay = Replay(max_event_bytes=max_bytes)
    replay.feed_stream(io.BytesIO(data).read, source="s", chunk_bytes=chunk)
    return replay


def _decided(replay: Replay) -> tuple[object, ...]:
    return (
        [f.to_dict() for f in replay.latest_findings()],
        [i.to_dict() for i in replay.invalid],
        replay.summary(),
    )


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_chunk_size_never_changes_the_result(chunk: int) -> None:
    """Lines split across chunk boundaries are rejoined: any chunk size gives the
    fixture's four findings and the same report."""
    data = FIXTURE.read_bytes()
    replay = _audit(data, chunk=chunk)
    assert len(replay.latest) == 4
    assert _decided(replay) == _decided(_audit(data, chunk=1 << 20))


def test_crlf_bom_blank_lines_and_a_missing_final_newline() -> None:
    """A byte order mark, CRLF line ends and blank lines change nothing but line
    numbers; the last line needs no newline."""
    lines = FIXTURE.read_bytes().splitlines()
    data = b"\xef\xbb\xbf" + b"\r\n".join([lines[0], b"", *lines[1:], b"{bad"])
    replay = _audit(data, chunk=5)
    assert len(replay.latest) == 4
    assert [(i.line, i.offset) for i in replay.invalid] == [(len(lines) + 2, len(lines) + 2)]
    assert replay.summary()["events"] == len(lines)


@pytest.mark.parametrize("chunk", [3, 100, 1 << 20])
def test_an_oversize_line_is_reported_by_line_and_skipped(chunk: int) -> None:
    """A line over the limit is one invalid record at its own line number, whether it
    ends inside a chunk or spans many; the lines around it are still classified."""
    lines = FIXTURE.read_bytes().splitlines()
    giant = b'{"type":"progress","attrs":{"x":"' + b"y" * 5_000 + b'"}}'
    data = b"\n".join([*lines[:5], giant, *lines[5:]]) + b"\n"
    replay = _audit(data, chunk=chunk, max_bytes=1024)
    assert len(replay.latest) == 4
    assert [(i.line, i.field) for i in replay.invalid] == [(6, "(record)")]
    assert "over the limit of 1024 bytes" in replay.invalid[0].reason
    assert replay.records == len(lines) + 1


def test_stop_on_invalid_returns_at_the_first_bad_line() -> None:
    """With stop_on_invalid the stream is read no further than the first invalid line."""
    lines = FIXTURE.read_bytes().splitlines()
    data = b"\n".join([*lines[:3], b"[]", *lines[3:]]) + b"\n"
    replay = Replay()
    last = replay.feed_stream(io.BytesIO(data).read, source="s", stop_on_invalid=True)
    assert last == 4 and replay.invalid_count == 1 and replay.records == 4


def test_offsets_count_on_from_the_previous_source() -> None:
    """The returned offset continues the numbering across several sources."""
    data = FIXTURE.read_bytes()
    replay = Replay()
    end = replay.feed_stream(io.BytesIO(data).read, source="a")
    end2 = replay.feed_stream(io.BytesIO(data).read, source="b", offset=end)
    assert end == data.count(b"\n") and end2 == 2 * end


def _messy() -> bytes:
    """The fixture with blank and whitespace lines, bad JSON, an invalid field, a
    CRLF line end and two events on one line between its events."""
    lines = FIXTURE.read_bytes().splitlines()
    out: list[bytes] = []
    for n, line in enumerate(lines):
        out.append(line)
        out.append([b"", b"   ", b"{bad", b'{"type":"progress"}', line + b"\r", line + line][n % 6])
    return b"\n".join(out) + b"\n"


@pytest.mark.parametrize("chunk", [5, 200, 1 << 16])
def test_the_stream_feeds_as_one_feed_call_a_line_does(chunk: int) -> None:
    """feed_stream (each chunk's lines decoded, then fed) leaves the same findings,
    invalid records and summary as Replay.feed called line by line."""
    data = _messy()
    by_line = Replay()
    for n, line in enumerate(data.split(b"\n")[:-1], start=1):
        if line.strip():
            by_line.feed(line, offset=n, source="s", line=n)
    by_stream = _audit(data, chunk=chunk)
    assert by_line.invalid_count > 0 and len(by_line.latest) == 4
    assert _decided(by_stream) == _decided(by_line)
    assert by_stream.records == by_line.records


def test_stop_on_invalid_feeds_nothing_after_the_bad_line_in_its_chunk() -> None:
    """With stop_on_invalid, a key named only after the first invalid line is not
    known to the replay, though the two lines were read in one chunk."""
    lines = FIXTURE.read_bytes().splitlines()
    after = lines[0].replace(b'"export-ledger"', b'"after-the-stop"')
    data = b"\n".join([*lines[:3], b"[]", after, *lines[3:]]) + b"\n"
    replay = Replay()
    replay.feed_stream(io.BytesIO(data).read, source="s", stop_on_invalid=True)
    assert "export-ledger" in replay.states and "after-the-stop" not in replay.states
