"""The rdkafka engine: the live processor on confluent-kafka, one
transactional producer per worker process.

``engine.py`` holds the engine; ``run.py`` runs it in the worker process;
``takeover.py`` fences the departed owners of the partitions a worker is
assigned; ``table.py`` is its state table (memory or RocksDB). What both
engines share stays in :mod:`streams.live`. Importing this package imports
no Kafka client (each module does, when imported).
"""

from __future__ import annotations

__all__: list[str] = []
