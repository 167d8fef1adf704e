"""Where :class:`~edge.server.EdgeService` can be reached and what it says about itself:
its URLs, the mDNS records it advertises and the description ``edge serve`` prints."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from edge import __version__

from ._mdns import (
    WEBSOCKET_SERVICE,
    WYOMING_SERVICE,
    MdnsAdvertiser,
    advertised_addresses,
)
from ._protocol import PROTOCOL_VERSION
from ._service_parts import ServiceParts

WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # every interface: shown as the host name


class ServiceAddresses:
    """The addresses and description of the service built as ``parts``; ``running`` tells
    whether it listens now (its URLs are shown only then)."""

    def __init__(self, parts: ServiceParts, running: Callable[[], bool]) -> None:
        self.parts = parts
        self._running = running
        self.mdns: MdnsAdvertiser | None = None

    # -- addresses --------------------------------------------------------------------

    def _display_host(self, host: str | None = None) -> str:
        host = host or self.parts.settings.host
        if host in WILDCARD_HOSTS:
            return socket.gethostname()
        return host

    @property
    def websocket_url(self) -> str:
        scheme = "wss" if self.parts.tls is not None else "ws"
        return f"{scheme}://{self._display_host()}:{self.parts.websocket.bound_port}"

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
        return self._console_at("localhost") if self.parts.settings.host in WILDCARD_HOSTS else None

    def _console_at(self, host: str) -> str:
        scheme = "https" if self.parts.tls is not None else "http"
        base = f"{scheme}://{host}:{self.parts.websocket.bound_port}/"
        return base + (f"?token={quote(self.parts.token, safe='')}" if self.parts.token else "")

    @property
    def wyoming_uri(self) -> str | None:
        if self.parts.wyoming is None:
            return None
        return (
            f"tcp://{self._display_host(self.parts.wyoming_host)}:{self.parts.wyoming.bound_port}"
        )

    def advertiser(self) -> MdnsAdvertiser:
        s = self.parts.settings
        mdns = MdnsAdvertiser(self.parts.instance_name, interfaces=s.mdns_interfaces)
        addresses = advertised_addresses(s.host, s.mdns_interfaces)
        txt = {
            "version": __version__,
            "profile": self.parts.profile_name or "",
            "model": self.parts.models.get("llm", ""),
            "protocol": str(PROTOCOL_VERSION),
            "path": "/",
            "auth": "token" if self.parts.token is not None else "none",
            "tls": self.parts.tls_fingerprint or "none",  # SHA-256 of the certificate's key
        }
        mdns.add(WEBSOCKET_SERVICE, self.parts.websocket.bound_port, addresses, txt)
        if (
            self.parts.wyoming is not None and self.parts.wyoming_host == s.host
        ):  # reachable as advertised
            wyoming_txt = {**txt, "auth": "address" if s.wyoming_allow else "none", "tls": "none"}
            mdns.add(WYOMING_SERVICE, self.parts.wyoming.bound_port, addresses, wyoming_txt)
        return mdns

    def _access_note(self) -> dict[str, str]:
        s = self.parts.settings
        token_note = (
            "none needed (--insecure)"
            if self.parts.token is None
            else f"{self.parts.token}  (edge token shows it; --rotate for a new one)"
        )
        if s.wyoming_port is None:
            wyoming = "off"
        elif s.wyoming_allow:
            wyoming = "no token (Home Assistant cannot send one); clients: loopback, " + (
                ", ".join(s.wyoming_allow)
            )
        else:
            wyoming = "loopback only (--wyoming-allow ADDRESS lets Home Assistant in)"
        if self.parts.tls is None:
            tls = "off (--no-tls): plain http:// and ws://"
        else:
            c = self.parts.tls.certificate
            origin = "self-signed" if c.self_made else str(c.cert_path)
            tls = f"{origin}, until {c.not_after:%Y-%m-%d} (key SHA-256 below)"
        return {"token": token_note, "tls": tls, "wyoming access": wyoming}

    def placement(self) -> Any:
        """Where the local models run (:func:`edge.device.placement`), None without a
        device profile or with a remote LLM."""
        if self.parts.device is None or self.parts.settings.llm_url:
            return None
        from edge.device import placement

        return placement(
            self.parts.device, loaded_layers=getattr(self.parts.llm, "gpu_layers", None)
        )

    def describe(self) -> dict[str, Any]:
        """What runs, for ``edge serve`` to print."""
        d = self.parts.device
        where = self.placement()
        return {
            "profile": self.parts.profile_name,
            "chosen_by": d.choice.reason if d is not None else None,
            "models": self.parts.models,
            "llm": type(self.parts.llm).__name__,
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
            "context_topics": list(self.parts.gateway.context_topics),
            "voice": self.parts.voice is not None,
            "backends": {**(where.rows() if where else {}), **self.parts.backends.banner()},
            "websocket": self.websocket_url if self._running() else None,
            "wyoming": self.wyoming_uri if self._running() else None,
            "mdns": [i.name for i in self.mdns.infos] if self.mdns is not None else [],
            "access": self._access_note(),
            "notes": [*(d.notes if d is not None else []), *(where.warnings if where else [])],
        }
