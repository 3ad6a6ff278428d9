"""The root of fencewatch's error family, and the pure core's own errors.

Every error fencewatch raises derives from :class:`FencewatchError`, so a
caller (the CLI, an embedding service) can catch the project's errors in one
place without catching a client library's. The base lives here, in the core,
because the core raises errors too and must not import the adapters;
``streams.errors`` re-exports it next to the adapters' errors.

Errors about a bad value also derive from :class:`ValueError`: callers that
validate input catch ``ValueError``, and these are that. Every field an error
carries is set by its constructor, never attached at the raise site.

Not compiled (mypyc): the compiled modules import these classes, and keeping
exceptions ordinary Python classes keeps them subclassable and picklable.
"""

from __future__ import annotations

__all__ = ["RECORD_FIELD", "ConfigError", "FencewatchError", "InvalidEvent", "StateError"]

#: The ``field`` of an event rejected as a whole (malformed JSON, not valid
#: UTF-8, not a JSON object, over the size cap): a name, so counts by field
#: (the live processor's metrics, dead-letter headers) never show an empty one.
RECORD_FIELD = "(record)"


def _rebuild(
    cls: type[BaseException], args: tuple[object, ...], state: dict[str, object]
) -> BaseException:
    # Unpickling without calling __init__: the message and every field come
    # back as they were, whatever the constructor's signature.
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class FencewatchError(Exception):
    """Base class of fencewatch's own errors.

    Every one round-trips through pickle (so through multiprocessing and
    Celery's result backends) with its type, message and fields: the default
    would call ``cls(*args)`` with the message alone, which fails for errors
    whose constructor takes their fields (``StaleOwner(key, epoch, ...)``)."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ConfigError(FencewatchError, ValueError):
    """A setting out of its allowed range (e.g. a detector bound too small)."""


class InvalidEvent(FencewatchError, ValueError):
    """An event that breaks the contract (SPEC §2, §7); ``field`` names the
    culprit: a field name, ``"key"`` for the Kafka key, or :data:`RECORD_FIELD`
    when the whole record is at fault (malformed JSON, not valid UTF-8, not an
    object, over the size cap)."""

    def __init__(self, field: str | None, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def __reduce__(self) -> tuple[type[InvalidEvent], tuple[str | None, str]]:
        # Exceptions pickle their ``args``; this one's constructor takes two.
        return (type(self), (self.field, self.reason))


class StateError(FencewatchError, ValueError):
    """Serialized detector state that cannot be decoded (corrupt, or written by
    a newer build)."""
