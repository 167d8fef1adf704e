"""What the store keeps for a participant, as plain values (no SQL outside ``_store.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RecordKind = Literal["exchange", "update", "state"]


@dataclass(frozen=True)
class Record:
    """One thing recorded for a participant, verbatim: a dialogue ``exchange``, an
    incremental topic ``update`` or a summary topic's ``state``.

    ``id`` is the store's row id (increasing in recording order); ``in_view`` is True while
    the record is part of the model's view (not yet compacted; for a state, the current one).
    """

    kind: RecordKind
    section: str
    timestamp_us: int
    text: str = ""
    user: str = ""
    assistant: str = ""
    id: int = 0
    in_view: bool = True

    @property
    def size(self) -> int:
        return len(self.text.encode()) + len(self.user.encode()) + len(self.assistant.encode())


@dataclass(frozen=True)
class StoredSection:
    """A compacted section's rolling summary (``span`` is the time it covers)."""

    summary: str = ""
    span: tuple[int, int] | None = None
    stalled: bool = False


@dataclass
class StoredParticipant:
    """The model's view of one participant as stored: section summaries, the records still
    in view (oldest first), exchange identities, the system prompt last used to answer,
    and the newest compaction report (a JSON object)."""

    participant_id: str
    system: str | None = None
    sections: dict[str, StoredSection] = field(default_factory=dict)
    view: list[Record] = field(default_factory=list)
    identities: set[bytes] = field(default_factory=set)
    last_compaction: dict[str, Any] | None = None


@dataclass(frozen=True)
class ParticipantInfo:
    """A stored participant, for listings."""

    participant_id: str
    created_us: int
    last_seen_us: int
    records: int
    in_view: int
    history_bytes: int
    has_token: bool


@dataclass(frozen=True)
class Retention:
    """Limits on what is kept. ``history_bytes`` / ``history_age_s`` bound each
    participant's *compacted* history (records no longer in the model's view; the view is
    never touched); ``idle_expiry_s`` erases a participant not seen for that long (never
    one that is active), ``assigned_idle_expiry_s`` one whose id the service assigned (a
    client that named none: a one-off ``edge client --text``). None means no limit."""

    history_bytes: int | None = None
    history_age_s: float | None = None
    idle_expiry_s: float | None = None
    assigned_idle_expiry_s: float | None = None


class SessionRefused(PermissionError):
    """A hello named an existing participant without its session token."""
