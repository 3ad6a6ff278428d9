"""Every doc runs (issue 44): the code blocks of README.md and docs/*.md,
found by Sybil's Markdown lexer and run against the installed wheel.

The convention (tests/docs/README.md):

- ```python blocks run in order, in one namespace per document, in the
  installed venv's interpreter (tests/docs/pyblock_runner.py); a block that
  raises fails.
- ```console blocks: each line starting with ``$ `` is a command (a line
  ending in ``\\`` continues it on the next), run by one bash per document in
  the document's own temporary directory, the venv's bin first on PATH and
  ``FENCEWATCH_BOOTSTRAP_SERVERS`` naming the test broker. The lines after a
  command, up to the next ``$ ``, are its expected output, compared loosely
  (doctest's ELLIPSIS and NORMALIZE_WHITESPACE: ``...`` matches anything). A
  command must exit 0, unless its expected output is written (then the output
  is what is checked); a command without expected output is checked only by
  its exit status.
- A block that cannot run in CI has, on the line right before it,
  ``<!-- not-runnable: the reason -->`` (the reason is required).
- ```sh / ```bash / ```shell blocks are commands in a form that cannot be
  checked: they fail unless marked not-runnable (write them as ```console).
- Other languages (text, json, yaml, nginx, none) are not executed.
"""

from __future__ import annotations

import contextlib
import doctest
import json
import os
import queue
import re
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

__all__ = [
    "SESSION",
    "Command",
    "DocBlockParser",
    "DocSession",
    "parse_console",
]

#: The document namespace's key for the session its blocks run in.
SESSION = "__docs_session__"
#: Seconds one command or one Python block may take.
STEP_TIMEOUT_S = 240.0
#: Lines of output one command may print (the rest is a runaway, not a doc).
MAX_OUTPUT_LINES = 20_000
RUNNER = Path(__file__).with_name("pyblock_runner.py")
SHELLS = frozenset({"sh", "bash", "shell", "zsh"})
MARKER = re.compile(r"^[ \t]*<!--\s*not-runnable\b(?P<rest>.*?)-->[ \t]*$", re.MULTILINE)
_LOOSE = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass(frozen=True, slots=True)
class Command:
    """One ``$ `` command of a console block and the output written under it."""

    line: int  # in the document
    text: str
    expected: tuple[str, ...]


def parse_console(source: str, first_line: int) -> list[Command]:
    """The commands of a console block's text (``first_line``: its first line's number)."""
    commands: list[Command] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip():
                raise ValueError(f"line {first_line + i}: output before any '$ ' command")
            i += 1
            continue
        start = i
        text = lines[i][2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        i += 1
        expected: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        while expected and not expected[-1].strip():
            expected.pop()
        commands.append(Command(first_line + start, text, tuple(expected)))
    if not commands:
        raise ValueError(f"line {first_line}: a console block without a '$ ' command")
    return commands


class DocBlockParser:
    """A Sybil parser: every fenced block from Sybil's lexer, with the line before it."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(
            info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)
        )

    def __call__(self, document: Document) -> Iterator[Region]:
        markers = {m.start(): m for m in MARKER.finditer(document.text)}
        for region in self.lexer(document):
            info = str(region.lexemes["info"]).split()
            language = info[0].lower() if info else ""
            before = document.text.rfind("\n", 0, max(region.start - 1, 0)) + 1
            marker = markers.pop(before, None) if before < region.start else None
            source = str(region.lexemes["source"])
            line = document.text.count("\n", 0, region.start) + 2  # the block's first line
            if marker is not None:
                reason = marker.group("rest").strip()
                region.parsed = reason
                region.evaluator = _not_runnable
            elif language == "python":
                region.parsed = (line, source)
                region.evaluator = _run_python
            elif language == "console":
                region.parsed = (line, source)
                region.evaluator = _run_console
            elif language in SHELLS:
                region.parsed = language
                region.evaluator = _unmarked_shell
            else:
                continue  # text, json, yaml, ...: not executed
            yield region
        for start, marker in markers.items():  # a marker that marks no block
            end = marker.end()
            yield Region(start, end, parsed=marker.group(0).strip(), evaluator=_dangling)


def _not_runnable(example: Example) -> str | None:
    reason = str(example.parsed)
    if not reason.startswith(":") or not reason[1:].strip():
        return "<!-- not-runnable: ... --> needs the reason after a colon"
    return None


def _dangling(example: Example) -> str:
    return f"{example.parsed} is not on the line right before a code block"


def _unmarked_shell(example: Example) -> str:
    return (
        f"a ```{example.parsed} block is not checked: write it as ```console with '$ ' "
        "commands (and their output), or mark it <!-- not-runnable: the reason -->"
    )


def _session(example: Example) -> DocSession:
    session = example.namespace[SESSION]
    assert isinstance(session, DocSession)
    return session


def _run_python(example: Example) -> str | None:
    line, source = example.parsed
    return _session(example).python(example.path, line, source)


def _run_console(example: Example) -> str | None:
    line, source = example.parsed
    try:
        commands = parse_console(source, line)
    except ValueError as exc:
        return str(exc)
    session = _session(example)
    for command in commands:
        failure = session.console(command)
        if failure is not None:
            return failure
    return None


class _Lines:
    """A process's output, read line by line on a thread (a timeout stays possible)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def next(self, timeout: float) -> str | None:
        return self.lines.get(timeout=timeout)


class DocSession:
    """Where one document's blocks run: its directory, one bash, one Python."""

    def __init__(self, bin_dir: Path, env: dict[str, str], work: Path) -> None:
        self.bin_dir = bin_dir
        self.env = env
        self.work = work
        self._bash: subprocess.Popen[bytes] | None = None
        self._bash_out: _Lines | None = None
        self._python: subprocess.Popen[bytes] | None = None
        self._answers: _Lines | None = None
        self._answers_fd: IO[bytes] | None = None
        #: Where the installed fencewatch was imported from, by the Python blocks.
        self.imported: dict[str, Any] | None = None

    def __enter__(self) -> DocSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- console ---------------------------------------------------------------

    def console(self, command: Command) -> str | None:
        """None when the command ran as written, else what went wrong."""
        if self._bash is None:
            self._bash = subprocess.Popen(
                ["bash", "--noprofile", "--norc"], cwd=self.work, env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            assert self._bash.stdout is not None
            self._bash_out = _Lines(self._bash.stdout)
        assert self._bash.stdin is not None and self._bash_out is not None
        token = f"__docs_{uuid.uuid4().hex}__"
        # In braces, so `export`, `cd` and `&` act on this shell; never on our stdin.
        script = f"{{ {command.text}\n}} </dev/null 2>&1\nprintf '\\n%s %d\\n' {token} \"$?\"\n"
        self._bash.stdin.write(script.encode())
        self._bash.stdin.flush()
        got: list[str] = []
        status: int | None = None
        while status is None:
            try:
                line = self._bash_out.next(STEP_TIMEOUT_S)
            except queue.Empty:
                self.close()
                return _report(command, got, f"still running after {STEP_TIMEOUT_S:.0f} s")
            if line is None:
                return _report(command, got, "the shell exited")
            if line.startswith(token + " "):
                status = int(line.split()[1])
            elif len(got) < MAX_OUTPUT_LINES:
                got.append(line)
            else:  # no doc shows this much: a runaway command
                self.close()
                return _report(command, got, f"more than {MAX_OUTPUT_LINES} lines of output")
        if got and got[-1] == "":
            got.pop()  # the newline printed before the token
        if command.expected:
            want = _want(command.expected)
            if not doctest.OutputChecker().check_output(want, "\n".join(got) + "\n", _LOOSE):
                expected = "\n".join(command.expected)
                return _report(command, got, f"exit {status}; the output differs from:\n{expected}")
        elif status != 0:
            return _report(command, got, f"exit {status} (no output written that expects it)")
        return None

    # -- python ----------------------------------------------------------------

    def python(self, path: str, line: int, source: str) -> str | None:
        """None when the block ran without raising, else its output and traceback."""
        if self._python is None:
            read_fd, write_fd = os.pipe()
            log = (self.work / ".python-blocks.log").open("wb")
            with log:
                self._python = subprocess.Popen(
                    [str(self.bin_dir / "python"), "-I", str(RUNNER), str(write_fd)],
                    cwd=self.work, env=self.env, stdin=subprocess.PIPE, stdout=log,
                    stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True,
                )  # fmt: skip
            os.close(write_fd)
            self._answers_fd = os.fdopen(read_fd, "rb")
            self._answers = _Lines(self._answers_fd)
            self.imported = self._answer(path, line)
            if self.imported is None or "error" in self.imported:
                return f"line {line}: the Python runner did not start: {self._log_tail()}"
        assert self._python.stdin is not None
        self._python.stdin.write(
            (json.dumps({"path": path, "line": line - 1, "source": source}) + "\n").encode()
        )
        self._python.stdin.flush()
        answer = self._answer(path, line)
        if answer is None:
            return f"line {line}: the block did not finish: {self._log_tail()}"
        if not answer["ok"]:
            return f"line {line}: the block raised\n{answer['output']}{answer['error']}"
        return None

    def _answer(self, path: str, line: int) -> dict[str, Any] | None:
        assert self._answers is not None
        try:
            raw = self._answers.next(STEP_TIMEOUT_S)
        except queue.Empty:
            self.close()
            return None
        return None if raw is None else dict(json.loads(raw))

    def _log_tail(self) -> str:
        log = self.work / ".python-blocks.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else ""

    # -- end -------------------------------------------------------------------

    def close(self) -> None:
        """Stop the shell and the interpreter, and anything they left running."""
        for proc in (self._bash, self._python):
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()  # a clean end: EOF
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its background jobs too
            proc.wait(10)
        if self._bash is not None:  # background jobs outlive a shell that exited
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._bash.pid, signal.SIGKILL)
        if self._answers_fd is not None:
            self._answers_fd.close()
            self._answers_fd = None
        self._bash = self._python = None


def _want(expected: tuple[str, ...]) -> str:
    """The expected output for doctest's checker: a line of only ``...`` takes
    its line break with it, so it matches any number of lines, none too."""
    return "".join(line.strip() if line.strip() == "..." else line + "\n" for line in expected)


def _report(command: Command, got: list[str], what: str) -> str:
    shown = "\n".join(got[-60:])
    return f"line {command.line}: $ {command.text}\n{what}\ngot:\n{shown}"
