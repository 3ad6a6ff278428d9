"""Runs a document's ```python blocks, in order, in one namespace: started
with the installed venv's interpreter (``python -I``, so neither the checkout
nor this directory is on sys.path), one process per document.

Requests come on stdin, one JSON object a line (``path``, ``line``,
``source``); each answer goes to the file descriptor named by argv[1], one
JSON object a line: ``ok``, the block's ``output`` (what it printed) and, when
it raised, the ``error`` traceback. The first answer, before any request, says
where fencewatch was imported from and which detector it runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def main() -> int:
    answers = os.fdopen(int(sys.argv[1]), "w")

    def answer(**fields: object) -> None:
        answers.write(json.dumps(fields) + "\n")
        answers.flush()

    import streams
    from streams._native import native_summary

    answer(streams=streams.__file__, prefix=sys.prefix, detector=native_summary())
    namespace: dict[str, object] = {"__name__": "__main__"}
    for raw in sys.stdin:
        request = json.loads(raw)
        # Blank lines up to the block's line: a traceback names the document's line.
        code = "\n" * int(request["line"]) + request["source"]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(code, request["path"], "exec"), namespace)
        except BaseException:  # the block's failure is the answer, whatever it was
            answer(ok=False, output=out.getvalue(), error=traceback.format_exc())
        else:
            answer(ok=True, output=out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
