"""Error types shared across adapters.

Client libraries raise their own exceptions (confluent_kafka.KafkaException,
aiokafka errors, sqlite3/psycopg errors); adapters translate them into these
at the boundary so the CLI and the processor handle one family of errors.
"""

from __future__ import annotations

__all__ = ["BrokerError", "FencewatchError"]


class FencewatchError(Exception):
    """Base class of fencewatch's own errors."""


class BrokerError(FencewatchError):
    """A Kafka operation failed (unreachable broker, rejected request, timeout).

    ``code`` is the client's error name (e.g. ``"_TRANSPORT"``,
    ``"TOPIC_AUTHORIZATION_FAILED"``, ``"TIMEOUT"``) so callers can branch on
    it without importing the client library; ``retriable`` says whether the
    same call may succeed later.
    """

    def __init__(self, message: str, *, code: str = "UNKNOWN", retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable
