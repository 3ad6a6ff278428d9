"""Every doc runs (issue 44): each code block of README.md and docs/*.md, run
from the installed compiled wheel against a real broker, or marked
not-runnable with the reason (the convention: tests/docs/README.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.example import SybilFailure

from tests.docs.blocks import SESSION, DocBlockParser, DocSession, parse_console
from tests.support.installed import Installed, clean_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SYBIL = Sybil(parsers=[DocBlockParser()], path=str(ROOT), patterns=["README.md", "docs/*.md"])


def _run(document_path: Path, session: DocSession) -> int:
    """Evaluate every block of the document in order; how many ran or were checked."""
    document = SYBIL.parse(document_path)
    document.namespace[SESSION] = session
    count = 0
    for example in document:
        example.evaluate()
        count += 1
    return count


@pytest.mark.docs
@pytest.mark.kafka
@pytest.mark.timeout(1200)  # the first: the compiled wheel's build (cached) and its venv
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: Path(p).relative_to(ROOT).as_posix())
def test_the_doc_runs_from_the_installed_wheel(
    doc: Path, installed: Installed, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Every python and console block of the doc runs as written (its own directory, the
    compiled wheel's venv, the test broker); the rest are marked not-runnable or not code."""
    env = installed.env()
    env["FENCEWATCH_BOOTSTRAP_SERVERS"] = kafka_bootstrap
    # A doc may start its own broker (`fencewatch local start`, the README's
    # quick start): its state goes under this test's directory, and it is
    # stopped after, whatever happened (CI leaves no service running).
    env["FENCEWATCH_KAFKA_DIR"] = str(tmp_path / "local-kafka")
    work = tmp_path / "work"
    work.mkdir()
    try:
        with DocSession(installed.bin, env, work) as session:
            _run(doc, session)
    finally:
        if (tmp_path / "local-kafka").exists():
            subprocess.run(
                [str(installed.bin / "fencewatch"), "local", "stop"],
                env=env, capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        if session.imported is not None:  # the installed package ran, not the checkout
            assert Path(session.imported["streams"]).is_relative_to(installed.venv)
            assert session.imported["detector"] == "compiled"


# -- the convention itself, on small documents (no wheel, no broker) ---------


def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(textwrap.dedent(text))
    return path


def _check(tmp_path: Path, text: str) -> int:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    bin_dir = Path(sys.executable).parent
    with DocSession(bin_dir, clean_env(bin_dir), work) as session:
        return _run(_doc(tmp_path, text), session)


def test_console_output_is_compared_loosely_and_python_shares_one_namespace(
    tmp_path: Path,
) -> None:
    """$ commands run in one shell in the doc's directory (export carries over), output matches
    with ..., python blocks see each other's names; text blocks are not run."""
    ran = _check(
        tmp_path,
        """\
        ```console
        $ export GREETING=hello; echo "$GREETING world"
        hello   world
        $ printf 'a\\nb\\nc\\n' && echo "$GREETING" > made.txt
        a
        ...
        $ cat made.txt
        ```

        ```python
        answer = 42
        ```

        ```python
        assert answer == 42 and open("made.txt").read() == "hello\\n"
        ```

        ```text
        $ false
        ```
        """,
    )
    assert ran == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("```console\n$ echo one\ntwo\n```\n", "the output differs"),
        ("```console\n$ false\n```\n", "exit 1 (no output written"),
        ("```console\n$ exit 3\n```\n", "the shell exited"),
        ("```console\nfencewatch audit x.jsonl\n```\n", "output before any '$ ' command"),
        ("```python\nraise RuntimeError('boom')\n```\n", "RuntimeError: boom"),
        ("```python\nfrom streams.nope import x\n```\n", "ModuleNotFoundError"),
        ("```sh\nfencewatch run\n```\n", "write it as ```console"),
        ("<!-- not-runnable: -->\n```sh\nfencewatch run\n```\n", "needs the reason"),
        ("<!-- not-runnable -->\n```python\nx\n```\n", "needs the reason"),
        ("<!-- not-runnable: a service -->\n\n```sh\nx\n```\n", "not on the line right before"),
    ],
)
def test_a_block_that_does_not_do_as_written_fails(tmp_path: Path, text: str, message: str) -> None:
    """A wrong output, a failing command, a raising block, an unmarked sh block, a marker without
    a reason or away from its block: each fails naming why."""
    with pytest.raises(SybilFailure) as failure:
        _check(tmp_path, text)
    assert message in str(failure.value), str(failure.value)


def test_a_marked_block_is_not_run(tmp_path: Path) -> None:
    """A block with a reasoned not-runnable marker right before it is checked, not run."""
    ran = _check(
        tmp_path,
        """\
        <!-- not-runnable: a long-running service -->
        ```console
        $ touch ran && false
        ```
        """,
    )
    assert ran == 1 and not (tmp_path / "work" / "ran").exists()


def test_continued_commands_and_their_output() -> None:
    """A command ending in a backslash goes on to the next line; its output is what follows."""
    (first, second) = parse_console("$ echo a \\\n  b\na b\n\n$ true\n", 10)
    assert (first.line, first.text, first.expected) == (10, "echo a \\\n  b", ("a b",))
    assert (second.line, second.text, second.expected) == (14, "true", ())
