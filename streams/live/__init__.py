"""The live stream processor: the batch Processor and the faust-streaming app
that runs it (the topic replay reader is :mod:`streams.kafka.reader`).

Imports here are lazy-free on purpose: ``streams.live`` needs the ``kafka``
extra (faust, aiokafka, confluent-kafka, prometheus-client).
"""

from __future__ import annotations

from streams.live.processor import OutRecord, Processor, SourceRecord
from streams.live.settings import LiveSettings, settings_from_env

__all__ = [
    "LiveSettings",
    "OutRecord",
    "Processor",
    "SourceRecord",
    "settings_from_env",
]
