"""Following the docs in order finds nothing wrong (issue 44): the SDK
snippets of docs/sdk.md keep their lease store in ``agent.db``, the example
worker its own ``.run/agent.db``; one workflow key on both would hand out
epoch 1 twice, which ``fencewatch status`` then shows as critical
``conflicting_commit, epoch_reuse``. Each store gets its own keys."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_KEY = re.compile(r"tenant/[A-Za-z0-9_.-]+/\d{4}-\d{2}-\d{2}")


def _python_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))


def _shell_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))


def test_the_sdk_snippets_and_the_example_worker_use_different_keys() -> None:
    """Keys of sdk.md's agent.db snippets and of the agent_worker runs (docs, docstring) differ."""
    sdk = (ROOT / "docs" / "sdk.md").read_text()
    snippets = _python_blocks(sdk)
    assert 'open_database("sqlite:///agent.db")' in snippets  # the store these keys live in
    snippet_keys = set(_KEY.findall(snippets))
    worker_runs = [
        line
        for line in _shell_blocks(sdk).splitlines()
        + (ROOT / "examples" / "agent_worker.py").read_text().splitlines()
        if "--key" in line
    ]
    worker_keys = {m for line in worker_runs for m in _KEY.findall(line)}
    assert snippet_keys and worker_keys, (snippet_keys, worker_keys)
    assert not snippet_keys & worker_keys, snippet_keys & worker_keys


def test_no_other_doc_or_example_reuses_the_sdk_snippet_keys() -> None:
    """No tenant/... key appears both in sdk.md's snippets and in the fences or examples."""
    sdk_keys = set(_KEY.findall(_python_blocks((ROOT / "docs" / "sdk.md").read_text())))
    others = [ROOT / "docs" / "fences.md", *sorted((ROOT / "examples").glob("*.py"))]
    for path in others:
        shared = sdk_keys & set(_KEY.findall(path.read_text()))
        assert not shared, f"{path.name} reuses {shared} on another store"
