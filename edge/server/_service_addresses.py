"""Where :class:`~edge.server.EdgeService` can be reached and what it says about itself:
its URLs, the mDNS records it advertises and the description ``edge serve`` prints."""

from __future__ import annotations

import contextlib
import socket
from typing import Any
from urllib.parse import quote

from edge import __version__
from edge.llm import LLMService

from ._gateway import Gateway
from ._mdns import (
    WEBSOCKET_SERVICE,
    WYOMING_SERVICE,
    MdnsAdvertiser,
    advertised_addresses,
)
from ._protocol import PROTOCOL_VERSION
from ._remote_speech import Backends
from ._settings import ServiceSettings
from ._tls import CertificateKeeper
from ._websocket import WebSocketServer
from ._wyoming import WyomingServer

WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # every interface: shown as the host name


class ServiceAddresses:
    """The addresses and description of :class:`~edge.server.EdgeService` (a part of it)."""

    settings: ServiceSettings
    device: Any
    llm: LLMService
    models: dict[str, str]
    voice: Any
    gateway: Gateway
    tls: CertificateKeeper | None
    websocket: WebSocketServer
    wyoming: WyomingServer | None
    mdns: MdnsAdvertiser | None
    _stack: contextlib.AsyncExitStack | None
    backends: Backends

    instance_name: str
    profile_name: str | None
    token: str | None
    tls_fingerprint: str | None
    wyoming_host: str

    # -- addresses --------------------------------------------------------------------

    def _display_host(self, host: str | None = None) -> str:
        host = host or self.settings.host
        if host in WILDCARD_HOSTS:
            return socket.gethostname()
        return host

    @property
    def websocket_url(self) -> str:
        scheme = "wss" if self.tls is not None else "ws"
        return f"{scheme}://{self._display_host()}:{self.websocket.bound_port}"

    @property
    def console_url(self) -> str:
        """The browser console (``GET /`` on the WebSocket port), with the device token in
        it when one is needed, as notebook servers print theirs."""
        return self._console_at(self._display_host())

    @property
    def local_console_url(self) -> str | None:
        """The console opened on the device itself, when the service listens on every
        interface: ``http://localhost`` is a secure origin, so the page may use the
        microphone there (the host name's address is not). None otherwise."""
        return self._console_at("localhost") if self.settings.host in WILDCARD_HOSTS else None

    def _console_at(self, host: str) -> str:
        scheme = "https" if self.tls is not None else "http"
        base = f"{scheme}://{host}:{self.websocket.bound_port}/"
        return base + (f"?token={quote(self.token, safe='')}" if self.token else "")

    @property
    def wyoming_uri(self) -> str | None:
        if self.wyoming is None:
            return None
        return f"tcp://{self._display_host(self.wyoming_host)}:{self.wyoming.bound_port}"

    def _advertiser(self) -> MdnsAdvertiser:
        s = self.settings
        mdns = MdnsAdvertiser(self.instance_name, interfaces=s.mdns_interfaces)
        addresses = advertised_addresses(s.host, s.mdns_interfaces)
        txt = {
            "version": __version__,
            "profile": self.profile_name or "",
            "model": self.models.get("llm", ""),
            "protocol": str(PROTOCOL_VERSION),
            "path": "/",
            "auth": "token" if self.token is not None else "none",
            "tls": self.tls_fingerprint or "none",  # SHA-256 of the certificate's key
        }
        mdns.add(WEBSOCKET_SERVICE, self.websocket.bound_port, addresses, txt)
        if self.wyoming is not None and self.wyoming_host == s.host:  # reachable as advertised
            wyoming_txt = {**txt, "auth": "address" if s.wyoming_allow else "none", "tls": "none"}
            mdns.add(WYOMING_SERVICE, self.wyoming.bound_port, addresses, wyoming_txt)
        return mdns

    def _access_note(self) -> dict[str, str]:
        s = self.settings
        token_note = (
            "none needed (--insecure)"
            if self.token is None
            else f"{self.token}  (edge token shows it; --rotate for a new one)"
        )
        if s.wyoming_port is None:
            wyoming = "off"
        elif s.wyoming_allow:
            wyoming = "no token (Home Assistant cannot send one); clients: loopback, " + (
                ", ".join(s.wyoming_allow)
            )
        else:
            wyoming = "loopback only (--wyoming-allow ADDRESS lets Home Assistant in)"
        if self.tls is None:
            tls = "off (--no-tls): plain http:// and ws://"
        else:
            c = self.tls.certificate
            origin = "self-signed" if c.self_made else str(c.cert_path)
            tls = f"{origin}, until {c.not_after:%Y-%m-%d} (key SHA-256 below)"
        return {"token": token_note, "tls": tls, "wyoming access": wyoming}

    def placement(self) -> Any:
        """Where the local models run (:func:`edge.device.placement`), None without a
        device profile or with a remote LLM."""
        if self.device is None or self.settings.llm_url:
            return None
        from edge.device import placement

        return placement(self.device, loaded_layers=getattr(self.llm, "gpu_layers", None))

    def describe(self) -> dict[str, Any]:
        """What runs, for ``edge serve`` to print."""
        d = self.device
        where = self.placement()
        return {
            "profile": self.profile_name,
            "chosen_by": d.choice.reason if d is not None else None,
            "models": self.models,
            "llm": type(self.llm).__name__,
            "budgets": {
                **(d.context_budgets() if d is not None else {}),
                **(
                    {"router_context_budget_bytes": d.budgets.router_context_budget_bytes}
                    if d is not None
                    else {}
                ),
                **(
                    {
                        "kv_cache_budget_bytes": d.budgets.kv_cache_budget_bytes,
                        "warm_participants": d.budgets.warm_participants,
                    }
                    if d is not None
                    else {}
                ),
            },
            "context_topics": list(self.gateway.context_topics),
            "voice": self.voice is not None,
            "backends": {**(where.rows() if where else {}), **self.backends.banner()},
            "websocket": self.websocket_url if self._stack is not None else None,
            "wyoming": self.wyoming_uri if self._stack is not None else None,
            "mdns": [i.name for i in self.mdns.infos] if self.mdns is not None else [],
            "access": self._access_note(),
            "notes": [*(d.notes if d is not None else []), *(where.warnings if where else [])],
        }
