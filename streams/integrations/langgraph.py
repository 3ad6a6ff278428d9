"""LangGraph: run a graph thread under an owner epoch, fence its effects.

* The workflow key is the thread: ``langgraph/<thread_id>`` from
  ``config["configurable"]["thread_id"]`` (the unit LangGraph checkpoints and
  resumes, so the unit that must have one effect owner).
* :class:`GraphOwner` takes the lease for it (``reporter.own``, renewed in the
  background while the graph runs) and runs the graph with the
  :class:`~streams.integrations.runs.OwnedRun` in the config, resuming the
  thread from its checkpoint when it has one (another worker's crash or
  pause leaves it mid-way).
* :func:`fenced` wraps a node: ``progress`` when it starts (a worker that
  lost its lease or was displaced stops there with
  :class:`~streams.errors.StaleOwner`) and the
  run handed to the node, whose effects go through ``run.effect(sink, ...)``
  (the fenced sink or the outbox). A rejected effect raises StaleOwner, which
  aborts the stale worker's graph run.

::

    @fenced
    def publish(state: State, run: OwnedRun) -> dict:
        run.effect(ledger, f"publish {state['day']}", render(state))
        return {"published": True}

    builder.add_node("publish", publish)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    GraphOwner(reporter, ttl=30).run(graph, {"day": day}, {"configurable": {"thread_id": day}})

Needs the ``langgraph`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from streams.extras import needs_extra
from streams.integrations.runs import OwnedRun
from streams.sdk.reporter import OwnershipReporter

with needs_extra("langgraph"):
    from langchain_core.runnables import RunnableConfig

__all__ = ["CONFIG_KEY", "GraphOwner", "fenced", "owned_run", "workflow_key_for"]

#: Where the run travels in ``config["configurable"]``.
CONFIG_KEY = "fencewatch_run"
DEFAULT_KEY_PREFIX = "langgraph/"

S = TypeVar("S")


def workflow_key_for(config: Mapping[str, Any], prefix: str = DEFAULT_KEY_PREFIX) -> str:
    """``prefix + thread_id``; ValueError when the config names no thread
    (without a thread there is no durable unit to own)."""
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or str(thread) == "":
        raise ValueError('the graph config has no configurable "thread_id" to own')
    return f"{prefix}{thread}"


def owned_run(config: RunnableConfig) -> OwnedRun:
    """The run a :class:`GraphOwner` put in the config; RuntimeError when the
    graph was invoked without one (a fenced node must run under an owner)."""
    run = (config.get("configurable") or {}).get(CONFIG_KEY)
    if not isinstance(run, OwnedRun):
        raise RuntimeError("a fenced node ran outside GraphOwner.run(): no owner epoch")
    return run


def fenced(fn: Callable[[S, OwnedRun], Any]) -> Callable[[S, RunnableConfig], Any]:
    """Wrap ``fn(state, run)`` as a LangGraph node ``(state, config)``:
    ``progress`` (attrs: node, step) when it starts, StaleOwner if this worker
    is already displaced, then ``fn`` with the run for its effects."""
    name = getattr(fn, "__name__", "node")

    # Not functools.wraps: LangGraph reads the signature (through __wrapped__)
    # to decide whether to pass the config, and this node needs it.
    def node(state: S, config: RunnableConfig) -> Any:
        run = owned_run(config)
        meta = config.get("metadata") or {}
        attrs = {"node": meta.get("langgraph_node", name), "step": meta.get("langgraph_step")}
        run.stop_if_lost(f"before node {name!r}")
        if not run.checkpoint(**{k: v for k, v in attrs.items() if v is not None}):
            run.stop_if_lost(f"before node {name!r}")
        return fn(state, run)

    node.__name__ = node.__qualname__ = name
    node.__doc__ = fn.__doc__
    return node


class GraphOwner:
    """Runs graph threads under owner epochs taken through ``reporter.own``.

    ``ttl``: the lease, renewed in the background every third of it; a worker
    paused longer loses it to the next one. ``wait_s``: how long to wait for a
    thread another worker holds (else :class:`~streams.errors.LeaseHeld`).
    """

    def __init__(
        self,
        reporter: OwnershipReporter,
        *,
        ttl: float,
        wait_s: float = 0.0,
        key_prefix: str = DEFAULT_KEY_PREFIX,
    ) -> None:
        self.reporter = reporter
        self.ttl = ttl
        self.wait_s = wait_s
        self.key_prefix = key_prefix

    def run(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """Own the config's thread and run the graph: from its checkpoint when
        the thread has unfinished work (``input`` is then ignored), else from
        ``input``. Returns what ``graph.invoke`` returns; a stale effect raises
        StaleOwner out of it. ``durability`` defaults to ``"sync"``."""
        key = workflow_key_for(config, self.key_prefix)
        with self.reporter.own(key, ttl=self.ttl, wait_s=self.wait_s) as owner:
            run = OwnedRun(owner, self.reporter)
            cfg: RunnableConfig = {
                **config,
                "configurable": {**(config.get("configurable") or {}), CONFIG_KEY: run},
            }
            resume = bool(graph.get_state(config).next) if graph.checkpointer else False
            # "sync": each step's checkpoint is written before the next step
            # starts, so a worker frozen in a node holds no checkpointer lock
            # (SQLite) and the next owner resumes exactly after the last step.
            kwargs.setdefault("durability", "sync")
            return graph.invoke(None if resume else input, cfg, **kwargs)
