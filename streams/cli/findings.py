"""``fencewatch findings``: read the findings topic; follow it; alert hooks.

Without ``--follow`` (and without a hook) the read ends at the end offsets
captured at start and shows the latest revision of each finding. With
``--follow`` each new revision is shown as it arrives, an update of one shown
before marked as such. ``--exec``/``--webhook`` hand every revision to a hook
(docs/operate.md); with ``--group`` the position is committed only after the
hook took it.

Exit status: 0; 2 for a usage error, an unreachable broker, or a topic that
holds no findings; 3 when alert hooks delivered nothing (every finding
dead-lettered); 4 when a hooked read stopped (SIGTERM, or the drain time ran
out) with findings read but neither delivered nor dead-lettered (not
committed: a restart with the same --group sends them); 130 after Ctrl-C (a
second Ctrl-C stops the hook deliveries at once).
"""

from __future__ import annotations

import argparse
import gc
import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.core.findings import Finding
from streams.core.records import Kind, Severity
from streams.errors import FencewatchError
from streams.kafka.topics import DEFAULT_FINDINGS_TOPIC
from streams.report.terminal import term_safe

__all__ = ["register", "render_finding_line"]

#: Webhook lanes (sender threads) by default, and the requests each keeps
#: in flight at once (one connection each): one thread driving a window of
#: requests on libcurl's multi interface costs the least CPU per finding
#: (bench/findings_follow_cpu.py, 20,000 findings, load average ~20 on 2
#: cores: 47-52 µs with 1 x 32, 71-74 with 2 x 8, before the consumer's
#: acknowledgements were batched; docs/performance.md). Each finding's
#: revisions still arrive in order.
DEFAULT_WEBHOOK_LANES = 1
DEFAULT_CONCURRENCY = 32


def register(sub: Any) -> None:
    p = sub.add_parser(
        "findings",
        help="show or follow the findings topic; alert hooks (--exec, --webhook)",
        description="Read ownership findings: the latest revision of each, or follow new ones.",
        epilog="exit status: 0; 2 usage error, unreachable broker or no findings on the topic; "
        "3 hooks delivered nothing (all dead-lettered); 4 a hooked read stopped with findings "
        "neither delivered nor dead-lettered (not committed: a restart with the same --group "
        "sends them); 130 Ctrl-C",
    )
    add_connection_args(p)
    p.add_argument(
        "--topic", default=None, help=f"findings topic (default {DEFAULT_FINDINGS_TOPIC})"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--since", metavar="TIME", help="start at this time (ISO 8601 or epoch ms)")
    where.add_argument("--new", action="store_true", help="only findings produced from now on")
    p.add_argument("--follow", "-f", action="store_true", help="keep reading new findings")
    p.add_argument("--group", metavar="NAME", help="keep a durable position in this consumer group")
    p.add_argument("--min-severity", choices=[s.value for s in Severity])
    p.add_argument("--kind", action="append", default=[], choices=[k.value for k in Kind])
    p.add_argument("--workflow", action="append", default=[], metavar="KEY")
    p.add_argument("--prefix", metavar="P", help="workflow keys starting with P")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text")
    p.add_argument("--max-tracked", type=int, default=None, help="finding ids remembered")
    h = p.add_argument_group("alert hooks")
    target = h.add_mutually_exclusive_group()
    target.add_argument("--exec", dest="exec_cmd", metavar="CMD", help="run CMD per finding")
    target.add_argument(
        "--webhook",
        metavar="URL",
        help="POST each finding to URL (http or https, TLS verified; userinfo is sent as Basic "
        "auth; HTTP(S)_PROXY/NO_PROXY apply; redirects are not followed); shown and "
        "dead-lettered with userinfo and query values redacted",
    )
    h.add_argument(
        "--webhook-header",
        action="append",
        default=[],
        metavar="HEADER",
        help="an extra request header, repeatable: 'NAME: VALUE', or 'NAME=@FILE' (value read "
        "from FILE) or 'NAME=env:VAR' (value from environment variable VAR). Secrets never need "
        "to be on the command line (ps shows it to every user): Authorization, "
        "Proxy-Authorization and Cookie are only taken from a file or the environment",
    )
    h.add_argument(
        "--dead-letter",
        metavar="FILE",
        default="fencewatch-findings.dead.jsonl",
        help="undeliverable findings are appended here (default %(default)s)",
    )
    h.add_argument("--max-attempts", type=int, default=5, help="tries per finding (default 5)")
    h.add_argument("--max-in-flight", type=int, default=100, help="queued deliveries (100)")
    h.add_argument(
        "--hook-lanes",
        type=int,
        default=None,
        metavar="N",
        help="deliveries in parallel, each finding always on the same lane "
        f"(webhook: default {DEFAULT_WEBHOOK_LANES}, each with --hook-pipeline connections; "
        "exec: default 1)",
    )
    h.add_argument(
        "--hook-pipeline",
        type=int,
        default=None,
        metavar="N",
        help="webhook: first attempts a lane keeps in flight at once, each on a connection of "
        "its own (so up to lanes x N connections; a finding's revisions never together); "
        f"default {DEFAULT_CONCURRENCY}, or 1 (total order) when --hook-lanes 1 is given",
    )
    h.add_argument(
        "--hook-timeout",
        type=float,
        default=10.0,
        help="seconds per attempt, all of it: connecting, sending and the whole answer "
        "(webhook; an answer body over 64 KiB is not read on and fails the attempt) or the "
        "command's run (default 10)",
    )
    add_kafka_config_arg(p)
    p.set_defaults(handler=_main)


def _err(msg: str) -> None:
    print(f"fencewatch findings: {term_safe(msg)}", file=sys.stderr)


def render_finding_line(f: Finding, previous_revision: int | None = None) -> str:
    """One line per finding: severity, kind, key, epochs, effect, id/revision
    (control characters in the record's strings escaped: :func:`term_safe`)."""
    epochs = (
        f"epochs {','.join(map(str, f.epochs))}"
        if f.epochs is not None
        else f"epoch {f.stale_epoch} ({f.stale_worker})"
        + ("" if f.current_epoch is None else f" < {f.current_epoch} ({f.current_worker})")
    )
    effect = "" if f.effect_key is None else f"  effect {f.effect_key!r}"
    update = "" if previous_revision is None else f"  UPDATE of r{previous_revision}"
    return term_safe(
        f"{f.severity.value:<10} {f.kind.value:<18} {f.workflow_key}  {epochs}{effect}"
        f"  confidence {f.confidence.value}  {f.finding_id} r{f.revision}{update}"
    )


#: How long a graceful stop (the first SIGTERM/SIGINT) lets the hook
#: deliveries already read finish before giving up the rest.
STOP_DRAIN_S = 30.0


class _Stop:
    """SIGTERM/SIGINT: the first stops the reader (the batch read and the
    queued deliveries drain, within STOP_DRAIN_S, and positions are
    committed); a second one stops the hook deliveries at once (what was not
    delivered stays uncommitted, so a restart sends it)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.sender: Any = None
        self.signals: list[int] = []
        #: time.monotonic() by which a graceful stop gives up (None: running).
        self.deadline: float | None = None

    def giving_up(self) -> bool:
        """A second signal came, or the graceful stop's drain time is over."""
        if len(self.signals) > 1:
            return True
        return self.deadline is not None and time.monotonic() > self.deadline

    def drain_left(self) -> float:
        """Seconds the deliveries in progress may still take to finish."""
        if self.deadline is None:
            return STOP_DRAIN_S
        return max(0.0, self.deadline - time.monotonic())

    @property
    def interrupted(self) -> bool:
        """Ctrl-C (SIGINT) was the first signal: exit 130, as audit and demo."""
        return bool(self.signals) and self.signals[0] == signal.SIGINT

    def handle(self, sig: int, _frame: FrameType | None) -> None:
        self.signals.append(sig)
        if len(self.signals) == 1:
            self.deadline = time.monotonic() + STOP_DRAIN_S
            self.consumer.stop()
        elif self.sender is not None:
            self.sender.stop_now()


@contextmanager
def _stop_on_signals(stop: _Stop) -> Iterator[None]:
    old = {s: signal.signal(s, stop.handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _settings(args: argparse.Namespace) -> Any:
    from streams.cli.audit import _time_ms as time_ms
    from streams.findings import (
        DEFAULT_FINDINGS_TOPIC,
        DEFAULT_MAX_TRACKED,
        FindingFilter,
        FindingsSettings,
    )
    from streams.kafka.reader import BEGINNING, END, Timestamp

    conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
    start = Timestamp(time_ms(args.since)) if args.since else END if args.new else BEGINNING
    return FindingsSettings(
        connection=conn,
        topic=args.topic or DEFAULT_FINDINGS_TOPIC,
        group=args.group,
        start=start,
        follow=args.follow,
        filter=FindingFilter(
            min_severity=Severity(args.min_severity) if args.min_severity else None,
            kinds=frozenset(Kind(k) for k in args.kind),
            workflows=frozenset(args.workflow),
            prefix=args.prefix,
        ),
        max_tracked=args.max_tracked or DEFAULT_MAX_TRACKED,
    )


def _main(args: argparse.Namespace) -> int:
    from streams.findings import FindingsConsumer

    hooked = args.exec_cmd is not None or args.webhook is not None
    if args.format == "json" and (args.follow or hooked):
        _err("--format json is one document at the end of a bounded read: use jsonl or text")
        return 2
    if args.exec_cmd is not None:
        from streams.findings import ExecTarget

        program = ExecTarget.missing_program(args.exec_cmd)
        if program is not None:
            _err(f"--exec: {program}: command not found on PATH (nothing was read)")
            return 2
    if args.webhook_header and args.webhook is None:
        _err("--webhook-header goes with --webhook")
        return 2
    try:
        # The hook's URL, headers and timeout are checked before the broker
        # is asked anything (a typo is one line at once, not after a connect).
        targets = _hook_targets(args) if hooked else []
        settings = _settings(args)
        consumer = FindingsConsumer(
            settings, on_commit_state=lambda reason: _commit_state(settings.group, reason)
        )
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return 2
    stop = _Stop(consumer)
    status = 0
    try:
        with consumer, _stop_on_signals(stop):
            if hooked:
                status = _hooked(consumer, args, stop, targets)
            elif args.follow:
                _follow(consumer, args.format)
            else:
                _show(consumer, args.format)
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return 2
    except BrokenPipeError:  # `fencewatch findings | head`
        return 0
    checked = _not_findings_check(consumer)
    if checked:
        return checked
    final = 130 if stop.interrupted else status
    if status == ALL_DELIVERIES_FAILED:
        # The status said is the one returned (a Ctrl-C makes it 130, not 3).
        _err(f"no finding was delivered (exit {final})")
    return final


def _not_findings_check(consumer: Any) -> int:
    st = consumer.stats
    if st.not_findings:
        first = st.errors[0] if st.errors else ""
        if st.not_findings == st.records:
            from streams.findings.contents import reader_hint

            topic = consumer.settings.topic
            hint = reader_hint(st.other_kind, topic) or (
                "; for an events topic use fencewatch audit --topic"
            )
            _err(
                f"{topic} holds no findings ({st.not_findings} other records; first: {first}){hint}"
            )
            return 2
        _err(f"skipped {st.not_findings} records that are not findings (first: {first})")
    return 0


def _show(consumer: Any, fmt: str) -> None:
    latest = consumer.latest()
    if fmt == "jsonl":
        sys.stdout.write("".join(f.to_json().decode() + "\n" for f in latest))
    elif fmt == "json":
        doc = {"findings": [f.to_dict() for f in latest], "count": len(latest)}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        for f in latest:
            print(render_finding_line(f))
        print(f"{len(latest)} finding(s) on {consumer.settings.topic}")
    sel = consumer.settings.filter
    if not latest and (sel.workflows or sel.prefix):
        asked = ", ".join(repr(w) for w in sorted(sel.workflows)) or f"prefix {sel.prefix!r}"
        _err(
            f"no finding of {asked}: --workflow takes an exact key, --prefix a start "
            "(fencewatch status lists the workflows)"
        )


def _emit(batch: list[Any], fmt: str) -> None:
    """One line per delivery, written and flushed once per batch (a flush
    per finding was a write system call per finding)."""
    if fmt == "jsonl":
        # The delivery's body, the bytes the webhook sends too (encoded once),
        # written as bytes: no decode to text and encode back per finding.
        data = b"\n".join([d.body for d in batch]) + b"\n"
        out = getattr(sys.stdout, "buffer", None)
        if out is not None:
            sys.stdout.flush()  # anything written as text before goes first
            out.write(data)
            out.flush()
            return
        text = data.decode()
    else:
        text = "".join([render_finding_line(d.finding, d.previous_revision) + "\n" for d in batch])
    sys.stdout.write(text)
    sys.stdout.flush()


def _commit_state(group: str | None, reason: str | None) -> None:
    """One line when the broker stops storing the group's position, one when it
    stores it again (a follower rides out an outage; the operator hears of it)."""
    if reason is not None:
        _err(
            f"committing the position of group {group} failed ({reason}): retrying; a restart"
            " now would deliver again what came after the last stored position"
        )
    else:
        _err(f"the position of group {group} is stored again")


#: Records read per batch by a follower (a memory bound: one batch is held
#: while it is printed or waits for room in the hook lanes).
FOLLOW_BATCH = 500


def _follow(consumer: Any, fmt: str) -> None:
    while not consumer.stopping:
        batch = consumer.poll_batch(FOLLOW_BATCH, 0.5)
        if batch:
            _emit(batch, fmt)
            # Acknowledged once shown: a broken pipe leaves the batch uncommitted.
            consumer.ack_all(batch)


#: Exit status of a hooked read in which no delivery succeeded (every
#: finding dead-lettered): a wrong URL or a broken command must not look fine.
ALL_DELIVERIES_FAILED = 3
#: Exit status of a hooked read that stopped with findings read but neither
#: delivered nor dead-lettered (SIGTERM, or the stop's drain time ran out):
#: a service manager must see that alerts were left behind.
STOPPED_UNDELIVERED = 4


def _hook_targets(args: argparse.Namespace) -> list[Any]:
    """One hook target per lane, from the command line (ValueError: one line)."""
    from streams.findings import ExecTarget, WebhookTarget
    from streams.findings.webhook import parse_header

    given = args.hook_lanes
    lanes = given
    if lanes is None:
        lanes = DEFAULT_WEBHOOK_LANES if args.webhook is not None else 1
    if lanes < 1:
        raise ValueError("--hook-lanes must be at least 1")
    if not (0 < args.hook_timeout < math.inf):
        raise ValueError("--hook-timeout must be a number of seconds more than 0")
    if args.webhook is None:
        return [ExecTarget(args.exec_cmd, timeout_s=args.hook_timeout) for _ in range(lanes)]
    # One lane is the total-order choice: a failure among requests made
    # together is retried after them, so a lane asked for (--hook-lanes 1)
    # sends together only when told; the default lane keeps a window.
    together = args.hook_pipeline
    if together is None:
        together = DEFAULT_CONCURRENCY if given is None or lanes > 1 else 1
    if together < 1:
        raise ValueError("--hook-pipeline must be at least 1")
    headers = [parse_header(spec) for spec in args.webhook_header]
    return [
        WebhookTarget(
            args.webhook, timeout_s=args.hook_timeout, headers=headers, concurrency=together
        )
        for _ in range(lanes)
    ]


def _health_line(kind: str) -> Any:
    """One stderr line when deliveries start failing, one when they recover
    (not one per finding: the dead-letter count is said at the end)."""

    def report(failed: Any, attempts: int) -> None:
        if failed is not None:
            _err(
                f"{kind} deliveries are failing: {failed} (retried up to --max-attempts "
                "times per finding, then dead-lettered)"
            )
        else:
            _err(f"{kind} deliveries recovered ({attempts} attempt(s) had failed)")

    return report


def _hooked(consumer: Any, args: argparse.Namespace, stop: _Stop, targets: list[Any]) -> int:
    from streams.findings import DeadLetterFile, HookSender, RetryPolicy

    sender = HookSender(
        targets,
        consumer.ack,
        policy=RetryPolicy(max_attempts=args.max_attempts),
        dead_letters=DeadLetterFile(Path(args.dead_letter)),
        max_in_flight=args.max_in_flight,
        on_health=_health_line("webhook" if args.webhook is not None else "command"),
        done_all=consumer.ack_all,
    )
    stop.sender = sender
    # Everything made so far (modules, the clients) lives as long as the
    # process: out of the collector's way, so that its full collections,
    # which the deliveries' short-lived objects keep triggering, walk only
    # what the deliveries make (a few % of the CPU per finding).
    gc.freeze()
    handed = 0
    try:
        while not consumer.stopping and not consumer.finished:
            # A batch, at most what the lanes may hold: the reader then holds
            # at most one batch beyond --max-in-flight while it waits for room.
            batch = consumer.poll_batch(min(FOLLOW_BATCH, args.max_in_flight), 0.5)
            if not batch:
                continue
            _emit(batch, args.format)
            # Counted as handed over before it is: what submit_batch leaves
            # out when stopping is undelivered too.
            handed += len(batch)
            # The whole batch, even once a stop was asked for: its deliveries
            # go to several lanes, and one left out would hold back the
            # position past those delivered after it (a restart would repeat
            # them). Only a second signal or the stop's time gives up on it.
            if not sender.submit_batch(batch, stopping=stop.giving_up):
                break
    finally:
        pending = sender.pending
        left = stop.drain_left()
        if stop.signals and pending:
            _err(
                f"stopping: waiting up to {left:.0f} s for {pending} finding delivery(ies) in "
                "progress (Ctrl-C again to stop now; what is not delivered is not committed)"
            )
        sender.close(drain_timeout_s=left)
        st = sender.stats
        if st.dead_lettered:
            _err(f"{st.dead_lettered} finding(s) written to the dead letters {args.dead_letter}")
    undelivered = handed - st.delivered - st.dead_lettered
    if undelivered > 0:
        again = (
            f"a restart with --group {args.group} sends them"
            if args.group
            else "without --group they are not sent again"
        )
        _err(
            f"stopped with {undelivered} finding(s) neither delivered nor dead-lettered "
            f"(not committed: {again}; exit {STOPPED_UNDELIVERED})"
        )
        return STOPPED_UNDELIVERED
    if st.dead_lettered and not st.delivered:
        return ALL_DELIVERIES_FAILED
    return 0
