"""The service's settings: command-line flags and ``EDGE_*`` environment variables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_INSTRUCTIONS = (
    "You answer through a headset: reply in one to three short sentences, "
    "without lists or markdown."
)


def default_data_dir() -> Path:
    """Where the service keeps its state: ``$XDG_DATA_HOME/edge`` or ``~/.local/share/edge``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(base).expanduser() / "edge"


class ServiceSettings(BaseSettings):
    """What ``edge serve`` runs. Every field can come from ``EDGE_<NAME>`` (for example
    ``EDGE_PORT=9000``, ``EDGE_LLM_URL=http://gpu-box:8080/v1``); flags override them.

    ``edge serve``'s flags are generated from these fields (:mod:`edge.cli._flags`).

    ``wyoming_port`` 0 picks a free port, ``None`` turns the Wyoming server off;
    ``port`` 0 picks a free port for the WebSocket server. ``mdns_interfaces`` None
    advertises on every interface (tests use ``["127.0.0.1"]``).
    """

    model_config = SettingsConfigDict(env_prefix="EDGE_", extra="ignore", frozen=True)

    host: str = Field(default="0.0.0.0", description="address to listen on")
    port: int = Field(
        default=8765, ge=0, le=65535, description="WebSocket port (0 = any free port)"
    )
    wyoming_port: int | None = Field(
        default=10700,
        ge=0,
        le=65535,
        description="Wyoming port (0 = any free port)",
        json_schema_extra={"off_flag": "--no-wyoming"},
    )
    mdns: bool = Field(default=True, description="advertise the service over mDNS")
    mdns_interfaces: list[str] | None = Field(
        default=None,
        description="advertise only on this interface (repeatable; default every interface)",
        json_schema_extra={"flag": "--mdns-interface", "metavar": "ADDRESS"},
    )
    service_name: str | None = Field(
        default=None,
        description="mDNS instance name (none: edge on <hostname>)",
        json_schema_extra={"flag": "--name"},
    )
    profile: str | None = Field(
        default=None, description="device profile name or TOML path (none: detected)"
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="directory for the service's state (sessions store, access token)",
    )
    llm_url: str | None = Field(default=None, description="OpenAI-compatible server base URL")
    llm_model: str | None = Field(default=None, description="model name on the remote server")
    # -- remote speech (docs/deploy.md) --------------------------------------------------
    stt_url: str | None = Field(
        default=None,
        description="Wyoming speech recognition server, tcp://HOST:PORT, or auto (found "
        "over mDNS); none: in process",
        json_schema_extra={"metavar": "URL"},
    )
    tts_url: str | None = Field(
        default=None,
        description="Wyoming speech synthesis server, tcp://HOST:PORT, or auto (found over "
        "mDNS); none: in process",
        json_schema_extra={"metavar": "URL"},
    )
    tts_voice: str | None = Field(
        default=None, description="voice on the --tts-url server (none: its default voice)"
    )
    remote_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="longest wait for a remote speech server's answer",
        json_schema_extra={"metavar": "SECONDS"},
    )
    fallback: Literal["none", "local"] = Field(
        default="none",
        description="local: the in-process model answers while a remote speech server is down",
        json_schema_extra={"metavar": "none|local"},
    )
    voice: bool = Field(default=True, description="run the voice pipeline (STT, TTS, VAD)")
    notes: bool = Field(default=True, description="offer the notes destination")
    speculative_answers: bool = Field(
        default=True,
        description="start routing and the answer during the end-of-utterance pause",
    )
    shift_trimmed_history: bool = Field(
        default=True,
        description="reuse a stateless API client's model state when it drops its oldest "
        "messages, the rest shifted back (--no-shift-trimmed-history: evaluate it all "
        "again, exactly, as Ollama does)",
    )
    instructions: str = Field(
        default=DEFAULT_INSTRUCTIONS, description="the conversation's instructions to the model"
    )
    reply_sentences: int | None = Field(
        default=None,
        ge=0,
        description="most sentences in a reply, the rest not generated (0: no bound; "
        "default: the number the instructions state)",
        json_schema_extra={"metavar": "N"},
    )
    wyoming_reply_sentences: int = Field(
        default=1,
        ge=0,
        description="most sentences in a reply to a Wyoming (Home Assistant) client, the "
        "rest not generated (0: the same bound as other replies)",
        json_schema_extra={"metavar": "N"},
    )
    summary_context_topics: tuple[str, ...] = Field(
        default=("scene",),
        description="context topics whose latest text replaces the previous (repeatable)",
        json_schema_extra={"flag": "--summary-context-topic", "metavar": "TOPIC"},
    )
    incremental_context_topics: tuple[str, ...] = Field(
        default=(),
        description="context topics that accumulate and are compacted (repeatable)",
        json_schema_extra={"flag": "--incremental-context-topic", "metavar": "TOPIC"},
    )
    max_sessions: int = Field(default=32, ge=1, description="WebSocket sessions at once")
    outbox_size: int = Field(
        default=2048, ge=16, description="messages queued for a slow client before it is dropped"
    )
    handle_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="longest wait for an answer to a Wyoming handle request",
        json_schema_extra={"metavar": "SECONDS"},
    )
    # -- sessions (docs/server.md "Sessions") -------------------------------------------
    durable_sessions: bool = Field(
        default=True,
        description="keep sessions in <data_dir>/sessions.sqlite3 (false: in memory only)",
    )
    session_history_bytes: int | None = Field(
        default=None, ge=0, description="compacted history kept per participant, in bytes"
    )
    session_history_days: float | None = Field(
        default=None, gt=0, description="compacted history older than this is erased"
    )
    session_idle_days: float | None = Field(
        default=None, gt=0, description="participants not seen for this long are erased"
    )
    session_assigned_idle_days: float | None = Field(
        default=7,
        gt=0,
        description="participants whose id the service assigned (a client that named none, "
        "such as a one-off `edge client --text`) not seen for this long are erased",
    )
    # -- access (docs/server.md "Access") ------------------------------------------------
    token: SecretStr | None = Field(
        default=None,
        description="device access token (default: <data_dir>/token, generated)",
        json_schema_extra={"cli": False},  # not on a command line, where `ps` shows it
    )
    insecure: bool = Field(
        default=False, description="serve WebSocket sessions without a device access token"
    )
    allowed_origins: tuple[str, ...] = Field(
        default=(),
        description="a browser origin (scheme://host[:port]) that may connect, besides the "
        "own page (repeatable)",
        json_schema_extra={"flag": "--allow-origin", "metavar": "ORIGIN"},
    )
    wyoming_allow: tuple[str, ...] = Field(
        default=(),
        description="a client address or network served on Wyoming (repeatable; none: "
        "loopback only)",
        json_schema_extra={"metavar": "ADDRESS"},
    )
    # -- TLS (docs/server.md "TLS") -------------------------------------------------------
    tls: bool = Field(
        default=True,
        description="serve https:// and wss:// with a certificate made in <data_dir>/tls "
        "(--no-tls: plain HTTP, for a reverse proxy in front)",
    )
    tls_cert: Path | None = Field(
        default=None,
        description="your own certificate (PEM, chain) instead of the one made here",
        json_schema_extra={"metavar": "FILE"},
    )
    tls_key: Path | None = Field(
        default=None,
        description="the key of --tls-cert (PEM)",
        json_schema_extra={"metavar": "FILE"},
    )
    # -- bounds (docs/reliability.md) --------------------------------------------------------
    max_sessions_per_address: int = Field(default=8, ge=1, description="sessions per address")
    hello_timeout_s: float = Field(default=10.0, gt=0, description="time to say hello")
    max_wyoming_connections: int = Field(default=16, ge=1, description="Wyoming connections")
    wyoming_read_timeout_s: float = Field(
        default=30.0, gt=0, description="a Wyoming connection silent this long is closed"
    )
    max_synthesize_chars: int = Field(
        default=2000, ge=1, description="longest Wyoming synthesize text"
    )

    @model_validator(mode="after")
    def _tls_files(self) -> ServiceSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together (give both or neither)")
        if self.tls_cert is not None and not self.tls:
            raise ValueError("--tls-cert/--tls-key contradict --no-tls")
        return self

    @field_validator("stt_url", "tts_url")
    @classmethod
    def _speech_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if value != "auto":
            from edge.voice import parse_wyoming_url

            parse_wyoming_url(value)
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("host must not be empty")
        return value.strip()
