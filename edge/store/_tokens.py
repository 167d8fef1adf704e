"""A participant's session: its token (only a SHA-256 is kept) and small durable values."""

from __future__ import annotations

import hmac

from ._database import StoreDatabase, new_token, token_hash
from ._types import SessionRefused


class SessionTokens:
    """A participant's session: its token (only a SHA-256 is kept) and small durable values."""

    def __init__(self, database: StoreDatabase) -> None:
        self.database = database

    # -- sessions -----------------------------------------------------------------------

    def claim(self, participant_id: str, resume: str | None) -> tuple[str, bool]:
        """Open a session: a new (or token-less) participant gets a fresh session token;
        an existing one must present its token in ``resume``. Returns ``(token,
        resumed)``; raises :class:`SessionRefused`. Only a SHA-256 of the token is stored."""
        with self.database.transaction() as db:
            row = db.execute(
                "SELECT token_hash FROM participants WHERE id = ?", (participant_id,)
            ).fetchone()
            stored = row[0] if row is not None else None
            if stored is not None:
                if resume is None or not hmac.compare_digest(stored, token_hash(resume)):
                    raise SessionRefused(
                        f"participant {participant_id!r} already has a session: come back "
                        "with the session token it was given"
                        + (", and that token is not it" if resume is not None else "")
                        + f". Token lost? `edge sessions token {participant_id}` on the "
                        "service's machine issues a new one (the conversation is kept)"
                    )
                self.database.ensure(db, participant_id)
                return resume, True
            token = new_token()
            self.database.ensure(db, participant_id)
            db.execute(
                "UPDATE participants SET token_hash = ? WHERE id = ?",
                (token_hash(token), participant_id),
            )
            return token, row is not None

    def reissue(self, participant_id: str) -> str:
        """A new session token for a stored participant, for one who lost theirs: the old
        token stops working, the conversation is kept. ``KeyError`` when none is stored."""
        token = new_token()
        with self.database.transaction() as db:
            changed = db.execute(
                "UPDATE participants SET token_hash = ? WHERE id = ?",
                (token_hash(token), participant_id),
            ).rowcount
        if not changed:
            raise KeyError(f"no stored participant {participant_id!r}")
        return token

    def touch(self, participant_id: str) -> None:
        with self.database.transaction() as db:
            db.execute(
                "UPDATE participants SET last_seen_us = ? WHERE id = ?",
                (self.database.clock(), participant_id),
            )

    def session_value(self, participant_id: str, key: str) -> str | None:
        """What :meth:`set_session_value` kept under ``key`` for the participant."""
        with self.database.read() as db:
            row = db.execute(
                "SELECT value FROM session_state WHERE participant = ? AND key = ?",
                (participant_id, key),
            ).fetchone()
        return row[0] if row is not None else None

    def set_session_value(self, participant_id: str, key: str, value: str | None) -> None:
        """Keep ``value`` under ``key`` with the participant's session (None erases it);
        durable when the call returns, erased with the participant."""
        with self.database.transaction() as db:
            if value is None:
                db.execute(
                    "DELETE FROM session_state WHERE participant = ? AND key = ?",
                    (participant_id, key),
                )
                return
            self.database.ensure(db, participant_id)
            db.execute(
                "INSERT INTO session_state (participant, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (participant, key) DO UPDATE SET value = excluded.value",
                (participant_id, key, value),
            )
