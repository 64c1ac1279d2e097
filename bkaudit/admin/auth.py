"""Bearer tokens checked against configured SHA-256 hashes: an admin role and a read-only role."""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass


class Role(enum.IntEnum):
    READ = 1
    ADMIN = 2


@dataclass(frozen=True)
class Caller:
    name: str
    role: Role


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenBook:
    """name:hash entries -> who presents which token (constant-time comparison of the hashes)."""

    def __init__(self, *, admin: Iterable[str] = (), read: Iterable[str] = ()) -> None:
        self._entries: list[tuple[str, str, Role]] = []
        for role, entries in ((Role.ADMIN, admin), (Role.READ, read)):
            for entry in entries:
                name, _, digest = entry.partition(":")
                self._entries.append((name, digest.lower(), role))

    def identify(self, token: str) -> Caller | None:
        digest = hash_token(token)
        found = None
        for name, expected, role in self._entries:
            if hmac.compare_digest(digest, expected) and (found is None or role > found.role):
                found = Caller(name, role)
        return found
