"""The service's settings: command-line flags and ``EDGE_*`` environment variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
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

    ``wyoming_port`` 0 picks a free port, ``None`` turns the Wyoming server off;
    ``port`` 0 picks a free port for the WebSocket server. ``mdns_interfaces`` None
    advertises on every interface (tests use ``["127.0.0.1"]``).
    """

    model_config = SettingsConfigDict(env_prefix="EDGE_", extra="ignore", frozen=True)

    host: str = "0.0.0.0"
    port: int = Field(default=8765, ge=0, le=65535)
    wyoming_port: int | None = Field(default=10700, ge=0, le=65535)
    mdns: bool = True
    mdns_interfaces: list[str] | None = None
    service_name: str | None = Field(
        default=None, description="mDNS instance name (default: edge on <hostname>)"
    )
    profile: str | None = Field(default=None, description="device profile name or TOML path")
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="directory for the service's state (sessions store, access token)",
    )
    llm_url: str | None = Field(default=None, description="OpenAI-compatible server base URL")
    llm_model: str | None = Field(default=None, description="model name on the remote server")
    voice: bool = Field(default=True, description="run the voice pipeline (STT, TTS, VAD)")
    notes: bool = Field(default=True, description="offer the notes destination")
    instructions: str = DEFAULT_INSTRUCTIONS
    summary_context_topics: tuple[str, ...] = ("scene",)
    incremental_context_topics: tuple[str, ...] = ()
    max_sessions: int = Field(default=32, ge=1, description="WebSocket sessions at once")
    outbox_size: int = Field(
        default=2048, ge=16, description="messages queued for a slow client before it is dropped"
    )
    handle_timeout_s: float = Field(
        default=60.0, gt=0, description="longest wait for an answer to a Wyoming handle request"
    )
    # -- access (docs/server.md "Access") ------------------------------------------------
    token: SecretStr | None = Field(
        default=None, description="device access token (default: <data_dir>/token, generated)"
    )
    insecure: bool = Field(
        default=False, description="serve WebSocket sessions without a device access token"
    )
    allowed_origins: tuple[str, ...] = Field(
        default=(), description="browser origins (scheme://host[:port]) besides the own page"
    )
    wyoming_allow: tuple[str, ...] = Field(
        default=(),
        description="client addresses / networks allowed on Wyoming; empty: loopback only",
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

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("host must not be empty")
        return value.strip()
