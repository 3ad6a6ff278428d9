"""Adapters for the runtimes agents already run on, one module per runtime:

* :mod:`streams.integrations.otel` — OpenTelemetry (needs the ``otel`` extra);
* :mod:`streams.integrations.otlp` — OTLP/JSON trace files as evidence (pure);
* :mod:`streams.integrations.langgraph` — LangGraph (the ``langgraph`` extra);
* :mod:`streams.integrations.langgraph_checkpoint` — a fenced LangGraph
  checkpointer (the ``langgraph`` extra);
* :mod:`streams.integrations.celery` — Celery (the ``celery`` extra);
* :mod:`streams.integrations.temporal` — Temporal activities (the ``temporal`` extra).

Nothing here is imported by the core, the SDK or the CLI unless the feature is
used: import the module of the runtime you run. See docs/integrations.md.
"""

from __future__ import annotations

__all__: list[str] = []
