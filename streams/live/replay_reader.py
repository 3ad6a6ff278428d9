"""Moved to :mod:`streams.kafka.reader` (the Kafka layer); kept so code written
against the old path keeps working. New code imports ``streams.kafka.reader``."""

from __future__ import annotations

from streams.kafka.reader import BEGINNING, END, Bound, Offset, Timestamp, TopicRecord, iter_topic

__all__ = ["BEGINNING", "END", "Bound", "Offset", "Timestamp", "TopicRecord", "iter_topic"]
