"""The WebSocket session protocol: one JSON object per text frame, PCM16 in binary frames.

Every JSON message has a ``type``. Client messages are validated with
:func:`parse_client_message`, which raises :class:`ProtocolError` naming the problem; the
session answers an :class:`ErrorMessage` and goes on. Audio travels in binary frames:
client → server frames are raw little-endian PCM16 in the format the ``hello`` named;
server → client audio is an :class:`AudioMessage` header followed by one binary frame of
``bytes`` bytes (none when ``bytes`` is 0). See ``docs/server.md`` for an example session.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
)

PROTOCOL_VERSION = 2
SUPPORTED_PROTOCOLS = (1, 2)
MAX_TEXT_CHARS = 16_000  # one typed (or Wyoming handle) turn
FEATURES = ("end_of_utterance", "hold")
"""Client messages added within protocol 2, listed in ``welcome.features`` for clients to
test before sending them."""

PARTICIPANT_ID_RULE = (
    "1-64 characters: letters, digits, '_', '.', '-', starting with a letter or digit"
)
_PARTICIPANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_participant_id(value: str) -> str:
    """A client-chosen participant id, unchanged, or ``ValueError`` naming the rule (ids are
    never normalised, so two different ids can never share one history)."""
    if not _PARTICIPANT_ID.fullmatch(value):
        raise ValueError(f"participant_id must be {PARTICIPANT_ID_RULE}")
    return value


def new_participant_id(prefix: str = "p") -> str:
    """A server-assigned id nobody can guess (or claim in advance): ``p-`` + 12 hex."""
    return f"{prefix}-{secrets.token_hex(6)}"


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- client → server ----------------------------------------------------------------------


class AudioFormat(_Message):
    """The format of the client's microphone frames (PCM16, little endian)."""

    sample_rate: int = Field(default=16_000, ge=8_000, le=192_000)
    channels: int = Field(default=1, ge=1, le=2)


class Hello(_Message):
    """Opens the session: who the participant is and what audio they send and want.

    ``participant_id`` None lets the server pick one (random, ``p-`` + 12 hex); a chosen
    id must follow :data:`PARTICIPANT_ID_RULE`. ``audio`` None means the client sends no
    microphone audio; ``want_audio`` asks for spoken replies (binary frames). ``token`` is
    the device access token (protocol 2; may instead come as a bearer header). ``resume``
    is the participant's session token from an earlier ``welcome`` (protocol 2): naming an
    existing participant needs it.
    """

    type: Literal["hello"]
    participant_id: str | None = None
    display_name: str = Field(default="", max_length=200)
    audio: AudioFormat | None = None
    want_audio: bool = False
    protocol: int = PROTOCOL_VERSION
    token: str | None = Field(default=None, max_length=256, repr=False)
    resume: str | None = Field(default=None, max_length=256, repr=False)

    @field_validator("participant_id")
    @classmethod
    def _participant_id(cls, value: str | None) -> str | None:
        return None if value is None else check_participant_id(value)

    @field_validator("protocol")
    @classmethod
    def _version(cls, value: int) -> int:
        if value not in SUPPORTED_PROTOCOLS:
            raise ValueError(
                f"this server speaks protocol {PROTOCOL_VERSION} (and {SUPPORTED_PROTOCOLS[0]}), "
                f"not {value}"
            )
        return value


class TextTurn(_Message):
    """A typed turn: published as a ``UserQuery`` for the participant."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a text turn needs some text")
        return value


class Interrupt(_Message):
    """Stop the current reply (a stop button); ``request_id`` names the turn when known."""

    type: Literal["interrupt"]
    request_id: str | None = None


class EndOfUtterance(_Message):
    """Push-to-talk released: the utterance being spoken ends now (like Wyoming's
    ``audio-stop``), without waiting for the end-of-utterance silence."""

    type: Literal["end_of_utterance"]


class Hold(_Message):
    """Push-to-talk pressed: the client holds the floor. Until its ``end_of_utterance``
    a pause of any length stays inside the utterance (only the utterance length cap,
    ``max_utterance_s``, ends it sooner)."""

    type: Literal["hold"]


class ContextUpdate(_Message):
    """Background context for the conversation on one of the server's context topics."""

    type: Literal["context"]
    topic: str = Field(min_length=1)
    text: str = Field(max_length=64_000)


class Bye(_Message):
    """The participant leaves (suspended: the context stays for a later ``resume``); the
    server answers ``bye`` and closes the connection."""

    type: Literal["bye"]


# -- session features (protocol 2; docs/server.md "Sessions") ------------------------------


class Forget(_Message):
    """Erase this participant everywhere (whole conversation, summaries, session token);
    the server answers ``bye`` with reason ``forgotten`` and closes the connection."""

    type: Literal["forget"]


class HistoryRequest(_Message):
    """A page of the whole conversation (everything ever recorded), oldest first."""

    type: Literal["history"]
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=50, ge=1, le=500)


class ContextViewRequest(_Message):
    """The model's current view: summaries, entries, topic states, bytes vs budgets."""

    type: Literal["context_view"]


class CompactRequest(_Message):
    """Compact now: keep the newest ``keep_last`` entries of each section (at least the
    newest exchange), or install ``summary`` as the summary; ``section`` limits it."""

    type: Literal["compact"]
    keep_last: int | None = Field(default=None, ge=0, le=10_000)
    summary: str | None = Field(default=None, max_length=16_000)
    section: str | None = None


class LastCompactionRequest(_Message):
    type: Literal["last_compaction"]


class ExportRequest(_Message):
    """This participant as a versioned JSON document (``edge.session/1``)."""

    type: Literal["export"]


class ImportRequest(_Message):
    """Replace this participant's conversation with an exported one (from this or another
    device); the service's configuration is never changed by it."""

    type: Literal["import"]
    document: dict[str, Any]


SessionRequest = (
    Forget
    | HistoryRequest
    | ContextViewRequest
    | CompactRequest
    | LastCompactionRequest
    | ExportRequest
    | ImportRequest
)
ClientMessage = Annotated[
    Hello | TextTurn | Interrupt | EndOfUtterance | Hold | ContextUpdate | Bye | SessionRequest,
    Field(discriminator="type"),
]
CLIENT_TYPES = (
    "hello",
    "text",
    "interrupt",
    "end_of_utterance",
    "hold",
    "context",
    "bye",
    "forget",
    "history",
    "context_view",
    "compact",
    "last_compaction",
    "export",
    "import",
)
_CLIENT = TypeAdapter(ClientMessage)


class ProtocolError(ValueError):
    """A client message that cannot be used; the text names the problem, ``message_type``
    the message's ``type`` when it had a known one (what the ``error`` is in reply to)."""

    def __init__(self, message: str, message_type: str | None = None) -> None:
        super().__init__(message)
        self.message_type = message_type


def parse_client_message(
    raw: str,
) -> Hello | TextTurn | Interrupt | EndOfUtterance | Hold | ContextUpdate | Bye | SessionRequest:
    """Validate one JSON text frame from a client."""
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise ProtocolError("not valid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise ProtocolError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in CLIENT_TYPES:
        shown = repr(kind) if len(repr(kind)) <= 40 else repr(kind)[:39] + "…"
        raise ProtocolError(
            f"unknown message type {shown}; expected one of {', '.join(CLIENT_TYPES)}"
        )
    try:
        return _CLIENT.validate_python(data)
    except RecursionError:
        raise ProtocolError(f"invalid {kind!r} message: nested too deeply", kind) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][1:]) or kind}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise ProtocolError(f"invalid {kind!r} message: {problems}", kind) from None


# -- server → client ----------------------------------------------------------------------


class Welcome(_Message):
    """The answer to ``hello``: the session is open and the participant has joined."""

    type: Literal["welcome"] = "welcome"
    participant_id: str
    protocol: int = PROTOCOL_VERSION
    server: str
    profile: str | None = None
    models: dict[str, str] = {}
    context_topics: list[str] = []
    audio_out_rate: int | None = None  # sample rate of spoken replies, when wanted
    session_token: str | None = Field(default=None, repr=False)
    resumed: bool | None = None
    features: list[str] = list(FEATURES)

    @model_serializer(mode="wrap")
    def _v1_fields(self, handler: Any) -> dict[str, Any]:
        """Protocol 1 clients never see the session fields (None: not sent at all)."""
        data = handler(self)
        for key in ("session_token", "resumed"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class HistoryPage(_Message):
    """A page of the whole conversation: ``entries`` from ``offset`` of ``total``."""

    type: Literal["history"] = "history"
    offset: int
    total: int
    entries: list[dict[str, Any]]


class ContextView(_Message):
    """The model's view: ``blocks`` as rendered (summaries first), ``sections`` with their
    summary, entry count, bytes used and budget; ``dictating``: a note being dictated."""

    type: Literal["context_view"] = "context_view"
    blocks: list[dict[str, Any]]
    sections: dict[str, dict[str, Any]]
    dictating: list[str] | None = None  # the lines of a note being dictated, kept so far


class Compacted(_Message):
    type: Literal["compacted"] = "compacted"
    reports: list[dict[str, Any]]


class LastCompaction(_Message):
    type: Literal["last_compaction"] = "last_compaction"
    report: dict[str, Any] | None


class ExportMessage(_Message):
    type: Literal["export"] = "export"
    document: dict[str, Any]


class Imported(_Message):
    type: Literal["imported"] = "imported"
    participant_id: str
    records: int


class QueryEcho(_Message):
    """A turn of this participant (typed, or transcribed from speech) and its id: every
    reply to it carries this ``request_id``."""

    type: Literal["query"] = "query"
    request_id: str
    text: str
    origin: str = ""


class Reply(_Message):
    """One frame of a reply stream (``edge.interaction.ResponseOutput``)."""

    type: Literal["reply"] = "reply"
    text: str
    request_id: str | None
    source: str
    sequence: int
    final: bool
    timestamp_us: int | None = None


class TranscriptMessage(_Message):
    type: Literal["transcript"] = "transcript"
    text: str
    utterance: int
    final: bool
    truncated: bool = False


class AudioMessage(_Message):
    """Header of a chunk of spoken reply; a binary frame of ``bytes`` bytes follows."""

    type: Literal["audio"] = "audio"
    request_id: str | None
    source: str
    sequence: int
    final: bool
    sample_rate: int
    text: str = ""
    bytes: int


class InterruptedMessage(_Message):
    """Output stopped (barge-in, a stop request): flush buffered audio."""

    type: Literal["interrupted"] = "interrupted"
    reason: str = ""
    request_id: str | None = None


class Status(_Message):
    """``processing`` while a turn of this participant runs, then ``idle``."""

    type: Literal["status"] = "status"
    state: Literal["processing", "idle"]


NO_SPEECH = "no_speech"
"""The ``code`` of the ``error`` that ends an utterance in which no speech was heard."""


class ErrorMessage(_Message):
    """A message could not be used; the session goes on. ``in_reply_to`` is the ``type``
    of the client message it answers; ``code`` names a condition a client acts on
    (:data:`NO_SPEECH`)."""

    type: Literal["error"] = "error"
    message: str
    in_reply_to: str | None = None
    code: str | None = None

    @model_serializer(mode="wrap")
    def _no_code(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("code") is None:
            data.pop("code", None)
        return data


class Goodbye(_Message):
    type: Literal["bye"] = "bye"
    reason: str = ""


ServerMessage = (
    Welcome
    | QueryEcho
    | Reply
    | TranscriptMessage
    | AudioMessage
    | InterruptedMessage
    | Status
    | ErrorMessage
    | Goodbye
    | HistoryPage
    | ContextView
    | Compacted
    | LastCompaction
    | ExportMessage
    | Imported
)

_SERVER = TypeAdapter(Annotated[ServerMessage, Field(discriminator="type")])


def parse_server_message(raw: str) -> ServerMessage:
    """Validate one JSON text frame from the server (used by the client)."""
    return _SERVER.validate_json(raw)
