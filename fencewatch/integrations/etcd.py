"""Public name of :mod:`streams.integrations.etcd` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.etcd import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.etcd import __all__ as __all__
