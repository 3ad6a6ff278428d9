"""Finding identity families (SPEC §4): an enum, and finding ids that never change."""

from __future__ import annotations

from streams.core import Kind
from streams.core.findings import finding_id
from streams.core.records import Family
from tests.core.conftest import replay_fixture


def test_every_kind_has_a_family_and_the_commit_kinds_share_one() -> None:
    """Each kind maps to one Family; duplicate_commit and conflicting_commit share
    commit_repeat, every other kind has its own."""
    assert Kind.DUPLICATE_COMMIT.family is Family.COMMIT_REPEAT
    assert Kind.CONFLICTING_COMMIT.family is Family.COMMIT_REPEAT
    others = [k for k in Kind if k.family is not Family.COMMIT_REPEAT]
    assert len({k.family for k in others}) == len(others) == 5
    assert {k.family for k in Kind} == set(Family)


def test_commit_kinds_share_one_finding_id() -> None:
    """A duplicate_commit escalating to conflicting_commit keeps its finding id."""
    assert finding_id(Kind.DUPLICATE_COMMIT, "wf", None, "E") == finding_id(
        Kind.CONFLICTING_COMMIT, "wf", None, "E"
    )


def test_fixture_finding_ids_are_stable() -> None:
    """The SPEC §5 fixture's finding ids are the ones every earlier build emitted: ids are
    derived from the family values, which must never change."""
    replay = replay_fixture()
    assert [(f.kind.value, f.finding_id) for f in replay.latest_findings()] == [
        ("stale_activity", "fw1-f5475596bc967b7b86dfe909"),
        ("stale_attempt", "fw1-c89be90e4ac629c16e777b0c"),
        ("stale_commit", "fw1-e65883518afa703034993a7d"),
        ("conflicting_commit", "fw1-941e8141282a3366a4356552"),
    ]


def test_detector_computes_the_same_finding_ids_as_finding_id() -> None:
    """The detector's own (compiled) id computation equals findings.finding_id for
    every kind, with and without epoch and effect key, for any workflow key."""
    from streams.core.detector import _FAMILY_OF, _fid

    for kind in Kind:
        for key in ("wf", "tenant-7/export/3", "ключ/é", "a:b1:c"):
            for epoch in (None, 0, 7, 2**62):
                for ek in (None, "E", "fx:12", "ü"):
                    expected = finding_id(kind, key, epoch, ek)
                    assert _fid(_FAMILY_OF[kind], key, epoch, ek) == expected
