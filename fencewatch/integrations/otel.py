"""Public name of :mod:`streams.integrations.otel` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.otel import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.otel import __all__ as __all__
