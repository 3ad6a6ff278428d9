"""Which optional extra provides a missing module, and the one line that says so.

``pip install fencewatch`` brings only the file audit; Kafka, RocksDB,
PostgreSQL and the runtime integrations are extras (pyproject.toml). A command
or import that needs one of them must tell the user which ``pip install`` to
run, not end in a ``ModuleNotFoundError`` traceback naming a library they
never chose (``confluent_kafka``, ``faust``, ``opentelemetry``...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from streams.errors import MissingExtra

__all__ = ["MissingExtra", "extra_for", "needs_extra"]

# Top-level module -> the extra (pyproject.toml) that installs it.
_EXTRA_OF_MODULE: dict[str, str] = {
    "confluent_kafka": "kafka",
    "faust": "kafka",
    "aiokafka": "kafka",
    "mode": "kafka",  # faust-streaming's service framework
    "cramjam": "kafka",
    "prometheus_client": "kafka",
    "hypercorn": "kafka",  # fencewatch serve's HTTP server
    "h11": "kafka",
    "rocksdict": "rocksdb",
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "opentelemetry": "otel",
    "langgraph": "langgraph",
    "langchain_core": "langgraph",
    "celery": "celery",
    "kombu": "celery",
    "redis": "celery",
    "etcd3gw": "etcd",
    "futurist": "etcd",  # etcd3gw's thread pools
    "temporalio": "temporal",
}


def extra_for(exc: ModuleNotFoundError) -> str | None:
    """The extra that would provide the module ``exc`` could not find, or
    None when it is no optional dependency of fencewatch (a real bug)."""
    if isinstance(exc, MissingExtra):
        return exc.extra
    top = (exc.name or "").split(".", 1)[0]
    return _EXTRA_OF_MODULE.get(top)


@contextmanager
def needs_extra(extra: str) -> Iterator[None]:
    """Around the imports of an optional dependency: a missing module becomes
    :class:`MissingExtra` naming ``extra``."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        if extra_for(exc) is None:
            raise
        raise MissingExtra(extra, exc.name) from exc
