"""etcd elections as evidence: ``fencewatch source etcd`` (docs/integrations.md, "etcd").

:class:`EtcdSource` watches an election prefix and publishes each leadership
change (:mod:`streams.integrations.etcd_map`: the leader key's create revision
as the epoch, the revision it became leader at as ``seq``, its value as the
worker id) to the events topic, **exactly once**: every batch of evidence is
written in one Kafka transaction together with the etcd revision it was read
up to, a record keyed by the source's id on a compacted state topic. A restart
(``init_transactions`` aborts what a killed run left open) reads that revision
back, rebuilds the elections as they stood at it (a range read *at* that
revision) and watches from the next one: nothing is lost, nothing published
twice. When etcd compacted that revision away, the source says so in one line
and resyncs from a fresh snapshot (an acquisition for each current leader,
positioned at the snapshot's revision).

:class:`EtcdStamps` is the workers' side: an authoritative ``seq`` for their
progress and effects from the same revision counter (one etcd write per
stamp), so all evidence of the key is ordered by the store (``high``
confidence, SPEC §4) and the worker learns whether its key still leads.

Client: ``etcd3gw`` (OpenStack's, maintained, the v3 gRPC-gateway JSON API over
``requests``; no protobuf or gRPC build, so it works with etcd 3.4 to 3.7 and
any protobuf). Its ``Watcher`` drops the watch's ``canceled`` answer that
carries ``compact_revision`` (a watch from a compacted revision would then
wait forever, silently) and the boundaries of responses, so the watch stream is
read here through the client's own session and URL; everything else is the
client's.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from streams.core.records import Event, EventType, event_to_dict
from streams.core.validate import to_event
from streams.errors import ConfigError, EtcdCompacted, StoreError, StoreUnavailable
from streams.extras import needs_extra
from streams.fences.lease import Stamp
from streams.integrations.etcd_map import (
    Change,
    Elections,
    KeyValue,
    Rejected,
    TooManyKeys,
    Transition,
)
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_SOURCES_TOPIC,
    TopicSpec,
    validate_topic_name,
)

__all__ = [
    "DEFAULT_STATE_TOPIC",
    "Compacted",
    "EtcdClient",
    "EtcdSource",
    "EtcdStamps",
    "SourceSettings",
    "SourceStats",
]

#: Where sources keep the revision they published up to (compacted: only the
#: latest record per source matters).
DEFAULT_STATE_TOPIC = DEFAULT_SOURCES_TOPIC
_MAX_PREFIX_BYTES = 1024
_STATE_VERSION = 1


Compacted = EtcdCompacted  # the name this module raises and catches


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes:
    return base64.b64decode(text) if isinstance(text, str) and text else b""


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range end for "every key starting with ``prefix``"."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _kv(raw: dict[str, Any]) -> KeyValue:
    # The gateway writes int64 fields as JSON strings, and leaves out zeros.
    return KeyValue(
        _unb64(raw.get("key")),
        int(raw.get("create_revision", 0)),
        int(raw.get("mod_revision", 0)),
        _unb64(raw.get("value")),
    )


def _reason(exc: BaseException) -> str:
    """The useful part of a client error: requests' messages wrap the OS
    error ("[Errno 111] Connection refused") in a paragraph of pool detail."""
    text = str(getattr(exc, "detail_text", None) or exc) or type(exc).__name__
    found = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if found:
        return found.group(0)
    if "timed out" in text.lower():
        return "timed out"
    return text[:200]


def parse_endpoints(text: str) -> list[tuple[str, str, int]]:
    """``http://host:port[,https://...]`` into (scheme, host, port); ConfigError
    naming the bad endpoint otherwise."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        parts = urlsplit(item if "://" in item else f"http://{item}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in {"http", "https"} or not parts.hostname or port is None:
            raise ConfigError(
                f"etcd endpoint {item!r}: expected http[s]://HOST:PORT (the client URL)"
            )
        out.append((parts.scheme, parts.hostname, port))
    if not out:
        raise ConfigError("no etcd endpoint given: expected http[s]://HOST:PORT[,...]")
    return out


class EtcdClient:
    """The few etcd v3 calls the source and the stamps make, through etcd3gw;
    client failures leave as :class:`~streams.errors.StoreUnavailable` (no
    answer) or :class:`~streams.errors.StoreError`, naming the endpoint."""

    def __init__(self, endpoints: str, *, timeout_s: float = 10.0) -> None:
        with needs_extra("etcd"):
            import etcd3gw
            from etcd3gw import exceptions as etcd_exc

        self._exc = etcd_exc
        self._endpoints = parse_endpoints(endpoints)
        self.timeout_s = timeout_s
        last: StoreError | None = None
        # The first endpoint that answers; a member lost later is an error
        # the caller retries by building a new client.
        for scheme, host, port in self._endpoints:
            client = etcd3gw.Etcd3Client(
                host=host, port=port, protocol=scheme, timeout=timeout_s, api_path="/v3/"
            )
            self._client = client
            self.endpoint = f"{scheme}://{host}:{port}"
            try:
                self._post("/maintenance/status", {})
                return
            except StoreError as exc:
                last = exc
        assert last is not None
        raise last

    @property
    def gateway(self) -> Any:
        """The etcd3gw client (leases, puts: what a candidate needs)."""
        return self._client

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        e = self._exc
        try:
            out = self._client.post(self._client.get_url(path), json=body)
        except (e.ConnectionFailedError, e.ConnectionTimeoutError) as exc:
            raise StoreUnavailable(
                f"etcd at {self.endpoint} did not answer: {_reason(exc)}"
            ) from None
        except e.Etcd3Exception as exc:
            detail = str(getattr(exc, "detail_text", "") or exc)
            if "compacted" in detail:
                raise Compacted(int(body.get("revision", 0)), 0) from None
            raise StoreError(f"etcd at {self.endpoint}: {path}: {detail[:300]}") from None
        if not isinstance(out, dict):
            raise StoreError(f"etcd at {self.endpoint}: {path}: not a JSON object")
        return out

    def range_prefix(
        self, prefix: bytes, *, revision: int | None = None, limit: int = 0
    ) -> tuple[int, list[KeyValue], bool]:
        """The keys under ``prefix`` (at ``revision``, else now): the
        revision read at, the keys, and whether more than ``limit`` exist."""
        body: dict[str, Any] = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        if revision is not None:
            body["revision"] = revision
        if limit:
            body["limit"] = limit
        out = self._post("/kv/range", body)
        header = out.get("header") or {}
        kvs = [_kv(raw) for raw in out.get("kvs") or []]
        return int(header.get("revision", 0)), kvs, bool(out.get("more"))

    def watch(self, prefix: bytes, start_revision: int) -> Iterator[list[Change]]:
        """The watch's responses from ``start_revision`` on, each as its
        changes (a response never splits a revision). Raises
        :class:`Compacted` when etcd cancels the watch for compaction,
        StoreUnavailable when the stream breaks."""
        import requests

        body: dict[str, Any] = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(prefix_end(prefix)),
                "start_revision": start_revision,
                "progress_notify": True,
            }
        }
        try:
            resp = self._client.session.post(
                self._client.get_url("/watch"),
                json=body,
                stream=True,
                # etcd sends a progress notification every 10 minutes when
                # nothing changes: a silence longer than that is a member that
                # froze or a connection that died without a reset.
                timeout=(self.timeout_s, 660.0),
            )
        except requests.RequestException as exc:
            raise StoreUnavailable(f"etcd at {self.endpoint}: watch: {_reason(exc)}") from None
        try:
            if resp.status_code != 200:
                raise StoreError(f"etcd at {self.endpoint}: watch: HTTP {resp.status_code}")
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                doc = orjson.loads(line)
                if "error" in doc:
                    raise StoreError(f"etcd at {self.endpoint}: watch: {str(doc['error'])[:300]}")
                result = doc.get("result") or {}
                if result.get("canceled"):
                    compact = int(result.get("compact_revision", 0))
                    if compact:
                        raise Compacted(start_revision, compact)
                    reason = result.get("cancel_reason", "no reason given")
                    raise StoreError(f"etcd at {self.endpoint}: watch canceled: {reason}")
                events = result.get("events")
                if not events:
                    continue  # created, or a progress notification
                yield [
                    Change(ev.get("type", "PUT") != "DELETE", _kv(ev.get("kv") or {}))
                    for ev in events
                ]
        except requests.RequestException as exc:
            raise StoreUnavailable(
                f"etcd at {self.endpoint}: watch broke: {_reason(exc)}"
            ) from None
        finally:
            resp.close()
        raise StoreUnavailable(f"etcd at {self.endpoint}: the watch stream ended")

    def stamp(self, stamp_key: bytes, election: bytes) -> tuple[int, int | None]:
        """One write to ``stamp_key`` and, in the same transaction, the
        election's oldest key: (the write's revision, the leader's create
        revision or None)."""
        out = self._post(
            "/kv/txn",
            {
                "success": [
                    {"request_put": {"key": _b64(stamp_key), "value": ""}},
                    {
                        "request_range": {
                            "key": _b64(election + b"/"),
                            "range_end": _b64(prefix_end(election + b"/")),
                            "sort_order": "ASCEND",
                            "sort_target": "CREATE",
                            "limit": 1,
                            "keys_only": True,
                        }
                    },
                ]
            },
        )
        revision = int((out.get("header") or {}).get("revision", 0))
        leader = None
        for resp in out.get("responses") or []:
            kvs = (resp.get("response_range") or {}).get("kvs") or []
            if kvs:
                leader = int(kvs[0].get("create_revision", 0))
        return revision, leader

    def close(self) -> None:
        self._client.session.close()


class EtcdStamps:
    """Authoritative seqs for a worker's evidence on an etcd election:
    ``stamp(workflow_key, epoch)`` writes ``<stamp_prefix><workflow_key>``
    (a new revision of the store, so unique and after every election change
    before it) and reads the election's leader in the same transaction.
    Use with ``reporter.emit(..., stamp=stamps.stamp(key, epoch))``; the
    stamp key must lie outside the watched prefix."""

    def __init__(self, client: EtcdClient, *, stamp_prefix: str = "/fencewatch/stamps") -> None:
        self.client = client
        self.stamp_prefix = stamp_prefix.encode("utf-8")

    def stamp(self, workflow_key: str, epoch: int) -> Stamp:
        election = workflow_key.encode("utf-8")
        revision, leader = self.client.stamp(self.stamp_prefix + election, election)
        current = leader if leader is not None else 0
        return Stamp(revision, leader == epoch, current)


@dataclass(frozen=True, slots=True)
class SourceSettings:
    """What to watch and where to publish. ``source_id`` names the state
    record and derives the transactional id (two runs with one id fence each
    other: run one source per prefix); default ``etcd:<prefix>:<events topic>``."""

    endpoints: str
    prefix: str
    connection: KafkaConnection
    events_topic: str = DEFAULT_EVENTS_TOPIC
    state_topic: str = DEFAULT_STATE_TOPIC
    source_id: str | None = None
    max_keys: int = 100_000
    etcd_timeout_s: float = 10.0
    #: How long etcd may be away (a restart, a lost connection) before the
    #: source gives up.
    etcd_retry_s: float = 60.0
    transaction_timeout_ms: int = 60_000
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_endpoints(self.endpoints)
        raw = self.prefix.encode("utf-8")
        if not self.prefix.startswith("/") or not 2 <= len(raw) <= _MAX_PREFIX_BYTES:
            raise ConfigError(
                f"--prefix {self.prefix!r}: expected an etcd key prefix starting with '/'"
                f" (e.g. /election/), 2-{_MAX_PREFIX_BYTES} bytes"
            )
        for name, topic in (("events topic", self.events_topic), ("state topic", self.state_topic)):
            try:
                validate_topic_name(topic)
            except ValueError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        if self.events_topic == self.state_topic:
            raise ConfigError("the events and state topics must differ")
        if self.source_id is not None and not 1 <= len(self.source_id) <= 256:
            raise ConfigError("--source-id must be 1-256 characters")
        if not 0 < self.etcd_timeout_s <= 300 or not 0 <= self.etcd_retry_s <= 86_400:
            raise ConfigError("--etcd-timeout must be in (0, 300] s, --etcd-retry in [0, 86400] s")
        if not 1 <= self.max_keys <= 10_000_000:
            raise ConfigError(f"max_keys must be in 1..10000000, got {self.max_keys}")

    @property
    def id(self) -> str:
        return self.source_id or f"etcd:{self.prefix}:{self.events_topic}"

    @property
    def transactional_id(self) -> str:
        return "fencewatch-source-" + hashlib.sha256(self.id.encode("utf-8")).hexdigest()[:32]


@dataclass(slots=True)
class SourceStats:
    """Counts since the source first ran (kept in its state record)."""

    revision: int = 0
    published: int = 0
    skipped: int = 0
    resyncs: int = 0
    last_skipped: str | None = None


class EtcdSource:
    """Watch ``settings.prefix`` and publish its elections' transitions.
    ``notice`` receives one line per notable thing (start, resume, resync,
    a skipped value); :meth:`run` returns after ``max_batches`` transactions
    (None: until the watch fails, raising its error)."""

    def __init__(self, settings: SourceSettings, notice: Callable[[str], None]) -> None:
        self.settings = settings
        self.notice = notice
        self.stats = SourceStats()
        self._prefix = settings.prefix.encode("utf-8")
        self._elections = Elections(self._prefix, max_keys=settings.max_keys)
        self._etcd: EtcdClient | None = None
        self._producer: Any = None

    # -- setup --------------------------------------------------------------

    def _start(self) -> int:
        """Connect, fence earlier runs, read the state back; the revision to
        watch from."""
        from streams.kafka.admin import TopicAdmin
        from streams.kafka.clients import TransactionalProducer

        s = self.settings
        self._etcd = EtcdClient(s.endpoints, timeout_s=s.etcd_timeout_s)
        admin = TopicAdmin(s.connection)
        missing = admin.missing([s.events_topic])
        if missing:
            raise ConfigError(
                f"events topic {s.events_topic} does not exist (fencewatch topics create)"
            )
        partitions = admin.partitions([s.events_topic])[s.events_topic]
        # One record per transaction: hourly segments let compaction keep the
        # topic (and the restart's read of it) short.
        config = {"cleanup.policy": "compact", "segment.ms": str(3_600_000)}
        admin.ensure([TopicSpec(s.state_topic, partitions, -1, config)])
        producer = TransactionalProducer(
            s.connection,
            s.transactional_id,
            settings={"transaction.timeout.ms": s.transaction_timeout_ms, **s.extra},
        )
        # Fences an earlier run of this source and aborts its open
        # transaction, so what is read next is all that was committed.
        producer.init()
        self._producer = producer
        state = self._read_state()
        if state is None:
            self.notice(f"no state for {s.id}: starting from a snapshot of {s.prefix}")
            return self._snapshot("first start")
        self.stats = state
        try:
            _rev, kvs, more = self._etcd.range_prefix(
                self._prefix, revision=state.revision, limit=s.max_keys
            )
        except Compacted:
            return self._compacted(state.revision)
        if more:
            raise TooManyKeys(f"more than {s.max_keys} keys under {s.prefix}")
        self._elections.load(kvs)
        self.notice(
            f"resuming {s.id} after etcd revision {state.revision}"
            f" ({self.stats.published} events published before)"
        )
        return state.revision + 1

    def _read_state(self) -> SourceStats | None:
        from streams.kafka.keyread import read_key

        s = self.settings
        got = read_key(s.connection, s.state_topic, s.id.encode("utf-8"), limit=1, scan=100_000)
        if not got.records or got.records[-1].value is None:
            return None
        try:
            doc = orjson.loads(got.records[-1].value)
            return SourceStats(
                revision=int(doc["revision"]),
                published=int(doc.get("published", 0)),
                skipped=int(doc.get("skipped", 0)),
                resyncs=int(doc.get("resyncs", 0)),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise StoreError(
                f"state topic {s.state_topic}: the record of {s.id} is not a source state"
            ) from None

    def _compacted(self, revision: int) -> int:
        self.notice(
            f"etcd compacted revision {revision} away: resyncing {self.settings.prefix}"
            " from a fresh snapshot (acquisitions for the current leaders)"
        )
        self.stats.resyncs += 1
        return self._snapshot("resync after compaction")

    def _snapshot(self, why: str) -> int:
        assert self._etcd is not None
        rev, kvs, more = self._etcd.range_prefix(self._prefix, limit=self.settings.max_keys)
        if more:
            raise TooManyKeys(
                f"more than {self.settings.max_keys} keys under {self.settings.prefix}"
            )
        self._elections.load(kvs)
        self._commit(self._elections.snapshot_transitions(rev), rev, {"snapshot": why})
        return rev + 1

    # -- publishing ---------------------------------------------------------

    def _event(self, t: Transition, extra: dict[str, Any] | None) -> Event:
        attrs: dict[str, Any] = {"source": "etcd", "etcd_key": t.etcd_key}
        if t.previous_epoch is not None:
            attrs["previous_epoch"] = t.previous_epoch
            if t.previous_worker is not None:
                attrs["previous_worker"] = t.previous_worker
        if extra:
            attrs.update(extra)
        etype = EventType.LEASE_ACQUIRED if t.acquired else EventType.LEASE_RELEASED
        digest = hashlib.sha256(f"{t.workflow_key}\0{t.epoch}".encode()).hexdigest()[:16]
        doc = {
            "type": etype.value,
            "workflow_key": t.workflow_key,
            "epoch": t.epoch,
            "worker_id": t.worker_id,
            "seq": t.seq,
            # Deterministic: a copy published twice is one event to the detector.
            "event_id": f"etcd-{etype.value}-{t.seq}-{digest}",
            "attrs": attrs,
        }
        return to_event(doc)

    def _commit(
        self, changes: list[Transition | Rejected], revision: int, extra: dict[str, Any] | None
    ) -> None:
        s = self.settings
        records: list[tuple[str, bytes | None, bytes, list[tuple[str, bytes]]]] = []
        published = 0
        for ch in changes:
            if isinstance(ch, Rejected):
                self.stats.skipped += 1
                self.stats.last_skipped = ch.describe()
                self.notice(f"skipped {ch.describe()}")
                continue
            event = self._event(ch, extra)
            records.append(
                (
                    s.events_topic,
                    event.workflow_key.encode("utf-8"),
                    orjson.dumps(event_to_dict(event)),
                    [],
                )
            )
            published += 1
        state = {
            "v": _STATE_VERSION,
            "source": "etcd",
            "prefix": s.prefix,
            "events_topic": s.events_topic,
            "revision": revision,
            "published": self.stats.published + published,
            "skipped": self.stats.skipped,
            "resyncs": self.stats.resyncs,
        }
        records.append((s.state_topic, s.id.encode("utf-8"), orjson.dumps(state), []))
        self._producer.send_to(records)
        self.stats.published += published
        self.stats.revision = revision

    def run(self, max_batches: int | None = None) -> SourceStats:
        """Publish until ``max_batches`` transactions were written (None:
        until stopped). etcd going away (a member restarting, a lost
        connection) is ridden out: the source reconnects to the first
        endpoint that answers and watches on from the revision after its last
        transaction, for up to ``etcd_retry_s`` without an answer, then
        raises :class:`~streams.errors.StoreUnavailable`."""
        start = self._start()
        self.notice(f"watching {self.settings.prefix} from etcd revision {start}")
        batches = 0
        down_since: float | None = None
        pause = 0.2
        while max_batches is None or batches < max_batches:
            try:
                if self._etcd is None:
                    self._etcd = EtcdClient(
                        self.settings.endpoints, timeout_s=self.settings.etcd_timeout_s
                    )
                    self.notice(f"etcd answers again at {self._etcd.endpoint}")
                for response in self._etcd.watch(self._prefix, start):
                    down_since, pause = None, 0.2
                    changes: list[Transition | Rejected] = []
                    by_rev: dict[int, list[Change]] = {}
                    for ch in response:
                        by_rev.setdefault(ch.kv.mod_revision, []).append(ch)
                    for rev in sorted(by_rev):
                        changes.extend(self._elections.apply(rev, by_rev[rev]))
                    last = max(by_rev)
                    self._commit(changes, last, None)
                    start = last + 1
                    batches += 1
                    if max_batches is not None and batches >= max_batches:
                        break
            except Compacted:
                start = self._compacted(start)
            except StoreUnavailable as exc:
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    self.notice(f"{exc}: reconnecting (for up to {self.settings.etcd_retry_s:g} s)")
                elif now - down_since > self.settings.etcd_retry_s:
                    raise
                if self._etcd is not None:
                    self._etcd.close()
                    self._etcd = None
                time.sleep(pause)
                pause = min(pause * 2, 5.0)
        return self.stats

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
        if self._etcd is not None:
            self._etcd.close()
