"""The consuming-side fence of the outbox: apply an effect message through a
:class:`~streams.fences.sink.FencedSink` only if the epoch in its header is
current; the idempotency key in its header makes a redelivered or republished
message a no-op. This closes the windows Kafka's own fence leaves open (see
docs/fences.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from streams.core.records import MAX_INT63
from streams.errors import InvalidEffectMessage
from streams.fences.lease_sql import SqlLeaseStore
from streams.fences.outbox.producer import EFFECT_KEY_HEADER, EPOCH_HEADER, IDEMPOTENCY_HEADER
from streams.fences.sink import FencedSink, Receipt, check_effect_args

__all__ = ["EffectApplier", "EffectMessage", "InvalidEffectMessage", "parse_effect_message"]


@dataclass(frozen=True, slots=True)
class EffectMessage:
    workflow_key: str
    epoch: int
    effect_key: str
    idempotency_key: str
    payload: bytes


class _Message(Protocol):
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


def parse_effect_message(msg: _Message) -> EffectMessage:
    """Read key, payload and the fencewatch headers; InvalidEffectMessage on anything off."""
    raw_key = msg.key()
    if not raw_key:
        raise InvalidEffectMessage("message has no key (the workflow key)")
    try:
        key = raw_key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEffectMessage("message key is not UTF-8") from None
    headers: dict[str, bytes] = {}
    for name, value in msg.headers() or []:
        if value is not None and name not in headers:
            headers[name] = value
    try:
        epoch_text = headers[EPOCH_HEADER].decode("ascii")
        idem = headers[IDEMPOTENCY_HEADER].decode("utf-8")
        effect_key = headers.get(EFFECT_KEY_HEADER, headers[IDEMPOTENCY_HEADER]).decode("utf-8")
    except KeyError as exc:
        raise InvalidEffectMessage(f"missing header {exc.args[0]}") from None
    except UnicodeDecodeError:
        raise InvalidEffectMessage("a fencewatch header is not valid text") from None
    if not epoch_text.isdigit() or len(epoch_text) > 19 or int(epoch_text) > MAX_INT63:
        raise InvalidEffectMessage(f"{EPOCH_HEADER} is not an integer in [0, 2^63): {epoch_text!r}")
    return EffectMessage(key, int(epoch_text), effect_key, idem, msg.value() or b"")


class EffectApplier:
    """Applies effect messages through a fenced sink, only while their epoch is
    current. With ``leases`` (a lease store the applier can read), the sink
    is first advanced to the key's current epoch, so even the first message of
    a displaced owner after a takeover is refused; without it, the sink's own
    memory of the highest epoch it applied is the fence."""

    def __init__(self, sink: FencedSink, *, leases: SqlLeaseStore | None = None) -> None:
        self.sink = sink
        self.leases = leases

    def apply_message(self, msg: _Message) -> Receipt:
        """Apply one message; raises InvalidEffectMessage for a malformed one
        (the caller dead-letters it) and the sink's errors as StoreError."""
        em = parse_effect_message(msg)
        try:
            check_effect_args(
                em.workflow_key, em.epoch, em.effect_key, em.payload, self.sink.max_payload_bytes
            )
        except ValueError as exc:
            raise InvalidEffectMessage(str(exc)) from None
        if self.leases is not None:
            current = self.leases.current_epoch(em.workflow_key)
            if current > 0:
                self.sink.advance(em.workflow_key, current)
        return self.sink.apply(
            em.workflow_key,
            em.epoch,
            em.effect_key,
            em.payload,
            idempotency_key=em.idempotency_key,
        )
