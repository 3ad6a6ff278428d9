"""The findings consumer API: iterate the findings topic as typed records,
latest revision first-class, position committed after the handler returns;
and the alert hooks (a command, a webhook) built on it. See docs/operate.md."""

from __future__ import annotations

from streams.findings.consumer import (
    DEFAULT_FINDINGS_TOPIC,
    CommitFailed,
    ConsumerStats,
    Delivery,
    FindingsConsumer,
    FindingsSettings,
    TooManyFindings,
)
from streams.findings.hooks import (
    DeadLetterFile,
    DeliveryFailed,
    ExecTarget,
    HookSender,
    HookTarget,
    RetryPolicy,
    WebhookTarget,
)
from streams.findings.select import (
    DEFAULT_MAX_TRACKED,
    FindingFilter,
    NotAFinding,
    RevisionTracker,
    decode_finding,
)
from streams.kafka.reader import BEGINNING, END, Timestamp

# The tail's start bounds under the names the public API (fencewatch) has
# always given them: the bounded reader's one vocabulary (streams.kafka.reader).
#: Start at each partition's log start.
FROM_BEGINNING = BEGINNING
#: Start at each partition's end when the reader starts: only records produced later.
ONLY_NEW = END
#: Start at the first record whose timestamp is >= ``ms`` (epoch ms).
Since = Timestamp

__all__ = [
    "DEFAULT_FINDINGS_TOPIC",
    "DEFAULT_MAX_TRACKED",
    "FROM_BEGINNING",
    "ONLY_NEW",
    "CommitFailed",
    "ConsumerStats",
    "DeadLetterFile",
    "Delivery",
    "DeliveryFailed",
    "ExecTarget",
    "FindingFilter",
    "FindingsConsumer",
    "FindingsSettings",
    "HookSender",
    "HookTarget",
    "NotAFinding",
    "RetryPolicy",
    "RevisionTracker",
    "Since",
    "TooManyFindings",
    "WebhookTarget",
    "decode_finding",
]
