"""Audits as library calls: what ``fencewatch audit --topic`` and the demos
run (the CLI only parses flags, renders and prints).

* :mod:`streams.audit.topic`: replay a Kafka topic through the detector,
  with what the read covered (partial, deleted history) in the result.
"""

from __future__ import annotations

from streams.audit.topic import TopicAudit, audit_topic

__all__ = ["TopicAudit", "audit_topic"]
