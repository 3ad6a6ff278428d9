"""Generated bad input (SPEC §7) for the volume and fault tests.

:func:`bad_records` makes ``n`` records, each invalid for exactly one
reason, cycling through every class below; each is a (Kafka key, value,
class) triple. Keys are drawn from ``keys`` (the workflows of the valid
traffic they are mixed into: a bad neighbour on the same key must not harm
the valid events) or are absent.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BAD_CLASSES", "BadRecord", "bad_records"]

BadRecord = tuple[bytes | None, bytes, str]

# A value over the processor's 64 KiB default (FENCEWATCH_MAX_EVENT_BYTES).
_OVERSIZE = 65_536 + 1


def _doc(wkey: str, rng: random.Random) -> dict[str, Any]:
    return {
        "type": rng.choice(["progress", "lease_acquired", "effect_attempted"]),
        "workflow_key": wkey,
        "epoch": rng.randint(1, 9),
        "worker_id": f"w{rng.randint(1, 5)}",
        "seq": rng.randint(1, 10_000),
        "effect_key": "fx-bad",
    }


def _j(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _malformed_json(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    text = _j(_doc(k, rng))
    return k, rng.choice([text[: rng.randint(1, len(text) - 1)], b"{not json", b"", b"{}}", b"nul"])


def _not_an_object(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    return k, rng.choice([b"[1, 2]", b"42", b"null", b'"progress"', b"true"])


def _wrong_type(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    field, value = rng.choice(
        [
            ("epoch", "7"),
            ("epoch", 1.5),
            ("epoch", True),
            ("epoch", -1),
            ("epoch", 2**70),
            ("worker_id", 17),
            ("type", ["progress"]),
            ("seq", "x"),
            ("attrs", [1, 2]),
            ("effect_key", {"a": 1}),
        ]
    )
    doc[field] = value
    return k, _j(doc)


def _missing_field(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    doc["type"] = "effect_committed"
    del doc[rng.choice(["type", "workflow_key", "epoch", "worker_id", "effect_key"])]
    return k, _j(doc)


def _oversize(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    doc["attrs"] = {"pad": "x" * _OVERSIZE}
    return k, _j(doc)


def _too_long_string(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    doc["worker_id"] = "w" * 300  # the limit is 256 characters
    return k, _j(doc)


def _unknown_type(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    doc["type"] = rng.choice(["teleported", "PROGRESS", "lease_acquired ", ""])
    return k, _j(doc)


def _unknown_version(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    doc = _doc(k, rng)
    doc["v"] = rng.choice([0, 2, 99])
    return k, _j(doc)


def _key_mismatch(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    return k, _j(_doc(k + "-other", rng))


def _binary(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    # 0xff never occurs in UTF-8: not JSON text whatever the rest is.
    return rng.choice([k, None]), b"\xff" + rng.randbytes(rng.randint(0, 200))


def _deep_nesting(k: str, rng: random.Random) -> tuple[str | None, bytes]:
    depth = rng.choice([2_000, 10_000])
    doc = _j(_doc(k, rng))[:-1]
    return k, doc + b', "attrs": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


_CLASSES: dict[str, Callable[[str, random.Random], tuple[str | None, bytes]]] = {
    "malformed_json": _malformed_json,
    "not_an_object": _not_an_object,
    "wrong_type": _wrong_type,
    "missing_field": _missing_field,
    "oversize": _oversize,
    "too_long_string": _too_long_string,
    "unknown_type": _unknown_type,
    "unknown_version": _unknown_version,
    "key_mismatch": _key_mismatch,
    "binary": _binary,
    "deep_nesting": _deep_nesting,
}
BAD_CLASSES = tuple(_CLASSES)
# Oversize records are 64 KiB each: a few of them prove the point without
# making the topic hundreds of megabytes.
_WEIGHTS = {name: (1 if name == "oversize" else 10) for name in BAD_CLASSES}


def bad_records(n: int, keys: Sequence[str], seed: int = 13) -> list[BadRecord]:
    """``n`` invalid records; every class appears when ``n >= len(BAD_CLASSES)``."""
    rng = random.Random(seed)
    names = list(BAD_CLASSES)
    weights = [_WEIGHTS[c] for c in names]
    out: list[BadRecord] = []
    for i in range(n):
        cls = names[i] if i < len(names) else rng.choices(names, weights)[0]
        key, value = _CLASSES[cls](rng.choice(keys), rng)
        out.append((key.encode() if key is not None else None, value, cls))
    return out
