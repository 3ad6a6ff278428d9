"""Public name of :mod:`streams.integrations.otlp` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.otlp import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.otlp import __all__ as __all__
