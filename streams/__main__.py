"""``python -m streams`` is the ``fencewatch`` command."""

from __future__ import annotations

from streams.cli import main

raise SystemExit(main())
