"""The faust engine: the live processor on faust-streaming and aiokafka.

``app.py`` builds the faust app from settings (the batch loop over
``intake.py``, the transactional sender and commit gate ``txn.py``, the
direct changelog restore ``fast_restore.py``); ``seam.py`` is the one module
that reaches into faust's and aiokafka's internals (its digests in the
generated ``manifest.py``); ``run.py`` runs the app in the worker process and
replaces a fenced one; ``worker_app.py`` is the app for faust's own command
line. What both engines share stays in :mod:`streams.live`. Importing this
package imports no faust (each module does, when imported).
"""

from __future__ import annotations

__all__: list[str] = []
