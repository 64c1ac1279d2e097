"""The lifecycle rules: exactly the transitions of the design, each by its actor; records round-trip."""

from __future__ import annotations

import itertools

import pytest

from bkaudit.errors import FormatError
from bkaudit.model import lifecycle as lc

S = lc.LifecycleState
ALLOWED = {
    (S.ACTIVE, S.DRAINING): lc.Actor.OPERATOR,
    (S.DRAINING, S.DRAINED): lc.Actor.AUDITOR,
    (S.DRAINING, S.DRAINING_FAILED): lc.Actor.AUDITOR,
    (S.DRAINING_FAILED, S.DRAINED): lc.Actor.OPERATOR,
    (S.DRAINED, S.REMOVED): lc.Actor.OPERATOR,
}


@pytest.mark.parametrize("pair", list(itertools.product(S, S)), ids=lambda p: f"{p[0].value}->{p[1].value}")
def test_only_the_designed_transitions_by_their_actor(pair: tuple[S, S]) -> None:
    source, target = pair
    for actor in lc.Actor:
        if ALLOWED.get(pair) is actor:
            lc.check_transition(source, target, actor=actor)
        else:
            with pytest.raises(lc.TransitionRefused):
                lc.check_transition(source, target, actor=actor)


def test_read_only_states() -> None:
    assert {s for s in S if s.serves_reads_only} == {S.DRAINING, S.DRAINING_FAILED, S.DRAINED}


@pytest.mark.parametrize("text", ["DrainingFailed", "draining-failed", "DRAINING_FAILED", "drainingfailed"])
def test_parse_is_lenient_about_spelling(text: str) -> None:
    assert S.parse(text) is S.DRAINING_FAILED


def test_parse_refuses_unknown_states() -> None:
    with pytest.raises(ValueError, match="unknown lifecycle state"):
        S.parse("Retired")


def test_record_round_trip() -> None:
    record = lc.StateRecord(S.DRAINING, "alice", "2026-01-01T00:00:00.000Z", "scale down", S.ACTIVE)
    assert lc.parse(lc.encode(record)) == record


@pytest.mark.parametrize("data", [b"", b"\xff", b"[]", b'{"by": "x"}', b'{"state": "Nope"}', b"null"])
def test_malformed_records_are_format_errors(data: bytes) -> None:
    with pytest.raises(FormatError):
        lc.parse(data)


def test_conf_file_documents_the_defaults() -> None:
    from bkaudit import config
    from bkaudit.admin.settings import AdminSettings
    from bkaudit.lifecycle.settings import LifecycleSettings

    settings = config.load(environ={})
    assert settings.get(LifecycleSettings) == LifecycleSettings()
    assert settings.get(AdminSettings) == AdminSettings()


@pytest.mark.parametrize("entry", ["ops", "ops:abc", "ops:" + "g" * 64, ":" + "a" * 64])
def test_token_entries_must_be_name_and_sha256(entry: str) -> None:
    from bkaudit.admin.settings import AdminSettings
    from bkaudit.errors import ConfigError

    with pytest.raises(ConfigError):
        AdminSettings(admin_tokens=(entry,))


def test_token_book_roles() -> None:
    from bkaudit.admin.auth import Role, TokenBook, hash_token

    book = TokenBook(admin=[f"ops:{hash_token('a')}"], read=[f"viewer:{hash_token('r')}"])
    assert book.identify("a") is not None and book.identify("a").role is Role.ADMIN  # type: ignore[union-attr]
    assert book.identify("r") is not None and book.identify("r").role is Role.READ  # type: ignore[union-attr]
    assert book.identify("x") is None
