"""The runtime adapters under the public name, one module per runtime:
``fencewatch.integrations.otel`` (the ``otel`` extra), ``.otlp`` (pure),
``.langgraph`` and ``.langgraph_checkpoint`` (the ``langgraph`` extra),
``.celery`` (the ``celery`` extra), ``.temporal`` (the ``temporal`` extra),
``.etcd`` (the ``etcd`` extra) and ``.runs`` (the run/effect plumbing they
share). Each re-exports its ``streams.integrations`` module; nothing is
imported until a runtime's module is, so ``import fencewatch`` never pulls in
a runtime. See docs/integrations.md.
"""

from __future__ import annotations

__all__: list[str] = []
