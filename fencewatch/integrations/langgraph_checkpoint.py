"""Public name of :mod:`streams.integrations.langgraph_checkpoint` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.langgraph_checkpoint import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.langgraph_checkpoint import __all__ as __all__
