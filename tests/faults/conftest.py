"""Fault and volume tests: the live harness of tests/live, shared."""

from __future__ import annotations

from tests.live.conftest import LiveHarness, live

__all__ = ["LiveHarness", "live"]
