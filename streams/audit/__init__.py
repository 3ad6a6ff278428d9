"""Audits as library calls: what ``fencewatch audit --topic`` and the demos
run (the CLI only parses flags, renders and prints).

* :mod:`streams.audit.topic`: replay a Kafka topic through the detector,
  with what the read covered (partial, deleted history) in the result.
* :mod:`streams.audit.files`: replay JSON Lines files (the file audit).
* :mod:`streams.audit.ports`: the progress display and Ctrl-C they report to.

Nothing is imported here: the file audit must not load the Kafka layer
(``fencewatch audit FILE`` starts fast, and needs only orjson).
"""

from __future__ import annotations

__all__: list[str] = []
