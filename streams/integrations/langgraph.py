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
  (the owner's ``effect``: the fenced sink or the outbox, by the effect's
  risk). A rejected effect raises StaleOwner, which aborts the stale
  worker's graph run. Effects are ``irreversible`` unless the GraphOwner,
  the node (``@fenced(risk="deferrable")``) or the call says otherwise.

::

    @fenced
    def publish(state: State, run: OwnedRun) -> dict:
        run.effect(ledger, f"publish {state['day']}", render(state))
        return {"published": True}

    @fenced(risk="deferrable")          # may commit later if the store is away
    def index(state: State, run: OwnedRun) -> dict:
        run.effect(search, f"index {state['day']}", b"...")
        return {}

    builder.add_node("publish", publish)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    GraphOwner(reporter, ttl=30).run(graph, {"day": day}, {"configurable": {"thread_id": day}})

Needs the ``langgraph`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from streams.extras import needs_extra
from streams.integrations.runs import DEFAULT_RISK, OwnedRun, check_risk
from streams.sdk.owner import Risk
from streams.sdk.reporter import OwnershipReporter

if TYPE_CHECKING:
    from streams.sdk.owner import Owner

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


@overload
def fenced(fn: Callable[[S, OwnedRun], Any], /) -> Callable[[S, RunnableConfig], Any]: ...


@overload
def fenced(
    *, risk: Risk | None = None
) -> Callable[[Callable[[S, OwnedRun], Any]], Callable[[S, RunnableConfig], Any]]: ...


def fenced(fn: Callable[[S, OwnedRun], Any] | None = None, /, *, risk: Risk | None = None) -> Any:
    """Wrap ``fn(state, run)`` as a LangGraph node ``(state, config)``:
    StaleOwner if this worker's lease is already lost, ``progress`` (attrs:
    node, step) when it starts, StaleOwner if that shows it was displaced,
    then ``fn`` with the run for its effects. ``@fenced(risk="deferrable")``
    sets the node's default effect risk (else the GraphOwner's)."""
    node_risk = None if risk is None else check_risk(risk)

    def wrap(fn: Callable[[S, OwnedRun], Any]) -> Callable[[S, RunnableConfig], Any]:
        name = getattr(fn, "__name__", "node")

        # Not functools.wraps: LangGraph reads the signature (through __wrapped__)
        # to decide whether to pass the config, and this node needs it.
        def node(state: S, config: RunnableConfig) -> Any:
            run = owned_run(config).with_risk(node_risk)
            meta = config.get("metadata") or {}
            attrs = {"node": meta.get("langgraph_node", name), "step": meta.get("langgraph_step")}
            where = f"before node {name!r}"
            run.check(where)
            if not run.checkpoint(**{k: v for k, v in attrs.items() if v is not None}):
                run.check(where)
            return fn(state, run)

        node.__name__ = node.__qualname__ = name
        node.__doc__ = fn.__doc__
        return node

    return wrap if fn is None else wrap(fn)


class GraphOwner:
    """Runs graph threads under owner epochs taken through ``reporter.own``.

    ``ttl``: the lease, renewed in the background every third of it; a worker
    paused longer loses it to the next one. ``wait_s``: how long to wait for a
    thread another worker holds (else :class:`~streams.errors.LeaseHeld`).
    ``risk``: the default risk of the graph's effects (a node's
    ``@fenced(risk=...)`` and an effect's ``risk=`` override it).
    ``on_lost``: called once (on a background thread) when the lease is lost.
    """

    def __init__(
        self,
        reporter: OwnershipReporter,
        *,
        ttl: float,
        wait_s: float = 0.0,
        risk: Risk = DEFAULT_RISK,
        on_lost: Callable[[Owner], object] | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
    ) -> None:
        self.reporter = reporter
        self.ttl = ttl
        self.wait_s = wait_s
        self.risk = check_risk(risk)
        self.on_lost = on_lost
        self.key_prefix = key_prefix

    def run(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """Own the config's thread and run the graph: from its checkpoint when
        the thread has unfinished work (``input`` is then ignored), else from
        ``input``. Returns what ``graph.invoke`` returns. A stale effect raises
        StaleOwner out of it, and so does a deferred effect refused as stale
        once the lease store answered again (checked after the lease is
        released, the graph having gone on). ``durability`` defaults to
        ``"sync"``."""
        key = workflow_key_for(config, self.key_prefix)
        owner = self.reporter.own(key, ttl=self.ttl, wait_s=self.wait_s, on_lost=self.on_lost)
        with owner:
            run = OwnedRun(owner, risk=self.risk)
            cfg: RunnableConfig = {
                **config,
                "configurable": {**(config.get("configurable") or {}), CONFIG_KEY: run},
            }
            resume = bool(graph.get_state(config).next) if graph.checkpointer else False
            # "sync": each step's checkpoint is written before the next step
            # starts, so a worker frozen in a node holds no checkpointer lock
            # (SQLite) and the next owner resumes exactly after the last step.
            kwargs.setdefault("durability", "sync")
            result = graph.invoke(None if resume else input, cfg, **kwargs)
        # Leaving the block drained the deferred effects (or raised).
        run.settle()
        return result
