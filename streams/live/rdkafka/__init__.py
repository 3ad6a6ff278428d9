"""The rdkafka engine: the live processor on confluent-kafka, one
transactional producer per worker process.

``run.py`` starts it in the worker process. The engine is in parts with one
job each: ``engine.py`` (the consume loop), ``transaction.py`` (the
producer and the open transaction), ``commit.py`` (the bounded commit calls
and what a failed call calls for), ``restore.py`` (the state from the
changelog), ``rebalance.py`` (the assign, revoke and lost callbacks, the
rewind), ``count_watch.py`` (the partition count), ``takeover.py`` (the
fence of a departed worker's transactional id) and ``table.py`` (the state
table: memory or RocksDB). What both engines share stays in
:mod:`streams.live`. Importing this package imports no Kafka client (each
module does, when imported).
"""

from __future__ import annotations

__all__: list[str] = []
