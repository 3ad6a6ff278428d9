"""A key's stored value in the live state table and its changelog.

The value is the key's ``KeyState.to_bytes()``, followed, when the status
topic is on, by a NUL byte and a small JSON object (:class:`StatusMeta`: the
Kafka timestamps the status record carries and a digest of its last content,
so a record is written only when the status changed). Neither orjson (the
state) nor msgspec (the meta) writes a raw NUL, so the split is unambiguous;
a value without it is a bare state (an older changelog, or the status off).

Not compiled (``streams._native``): :class:`StatusMeta` is a msgspec Struct,
which mypyc does not compile; :mod:`streams.core.batch` calls it.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "META_ERRORS",
    "NO_META",
    "SEP",
    "StatusMeta",
    "decode_meta",
    "encode_meta",
    "join_value",
    "split_value",
]


class StatusMeta(
    msgspec.Struct,
    frozen=True,
    # Not tracked by the collector: it holds ints only (no cycle can run
    # through it), and one lives in the state cache per key, replaced every
    # batch: tracked, each was promoted and brought full collections closer.
    gc=False,
    rename={"seen": "s", "updated_ms": "u", "accepted": "n"},
):
    """What the status needs beyond the detector state, stored with it:
    stale epoch -> Kafka timestamp of its latest stale event (``seen``), the
    status's ``updated_ms``, and how many events the key had accepted when
    its last status record was written (``accepted``: the status is a
    function of the accepted evidence, so an unchanged count means an
    unchanged status -- an exact redelivery writes nothing). A Struct: one
    is built per changed key per batch, and a frozen dataclass's
    ``__init__`` costs several times more (docs/performance.md)."""

    seen: dict[int, int]
    updated_ms: int | None
    accepted: int

    def to_bytes(self) -> bytes:
        # msgspec writes the Struct as {"s": {"<epoch>": ms}, "u": .., "n": ..}:
        # the bytes orjson wrote from that dict (int keys as JSON strings),
        # at a third of the cost; one is written per changed key per batch.
        return _encode(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> StatusMeta:
        return _decode(data)


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StatusMeta).decode
#: ``StatusMeta`` -> its bytes in a stored value (what ``to_bytes`` gives),
#: for compiled callers: a C call, not an interpreted method.
encode_meta = _encode
#: A stored value's meta bytes -> ``StatusMeta`` (``from_bytes``), for
#: compiled callers, which split the value themselves (see
#: :func:`split_value`); it raises one of :data:`META_ERRORS` on a damaged one.
decode_meta = _decode
#: What decoding a damaged meta raises (msgspec's DecodeError is a ValueError).
META_ERRORS = (msgspec.DecodeError, KeyError, TypeError, ValueError, AttributeError)

#: No status record written yet.
NO_META = StatusMeta({}, None, -1)
SEP = b"\x00"


def split_value(value: bytes) -> tuple[bytes, StatusMeta | None]:
    """A stored value -> (``KeyState`` bytes, status meta or ``None``)."""
    state, sep, meta = value.partition(SEP)
    if not sep:
        return value, None
    try:
        return state, StatusMeta.from_bytes(meta)
    except META_ERRORS:
        return state, None  # a damaged trailer costs timestamps, never the state


def join_value(state: bytes, meta: StatusMeta | None) -> bytes:
    """The stored value of ``state`` bytes and its status meta (``None``: none)."""
    return state if meta is None else b"".join((state, SEP, _encode(meta)))
