"""``EdgeService``: the whole product in one runtime, with a lifecycle you can see.

The packages, the topics between them and the data flow of a spoken turn are drawn once,
in ``docs/architecture.md``; the construction (``_service_parts.build_parts``) follows it
step by step and returns the parts, frozen; the service holds them and runs them.

Startup: the LLM and the voice models load, the voice pipeline and runtime start, the
context manager and router open, then the servers listen and mDNS advertises them.
Shutdown is the reverse: mDNS withdrawn, servers closed (each session publishes its
departure), ``router.stop()``, ``conversation.close()``, ``context.close()``, runtime
stop, voice pipeline stop, pending warm-ups cancelled, ``llm.close()``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import tzinfo
from typing import Unpack

from edge.llm import Loadable
from edge.runtime import now_us

from ._mdns import MdnsAdvertiser
from ._ports import check_port_free
from ._service_addresses import ServiceAddresses
from ._service_parts import Injected, ServiceParts, build_parts
from ._settings import ServiceSettings

log = logging.getLogger(__name__)


class EdgeService:
    """The service ``edge serve`` runs; ``async with EdgeService(settings) as service:``.

    Parts can be injected (:class:`Injected`: tests pass a ``ScriptedLLM``,
    ``ScriptedDecisions`` and, as ``speech=SpeechParts(stt=, tts=, vad_factory=)``, fake
    speech models). Without an injected ``llm`` the device
    configuration is loaded (profile from ``settings.profile``, ``EDGE_PROFILE`` or
    detection) and sizes the LLM, the context manager and the router; with one, it is
    loaded only when a profile is named or a ``device`` config is given. ``clock`` (wall
    time in microseconds) and ``timezone`` are what the runtime, the store, the context
    manager and the conversation record and show times with (the system clock and the
    local zone by default).

    The service is its parts (:class:`ServiceParts`, built once, in :attr:`parts`; each is
    also an attribute, ``service.router is service.parts.router``), its addresses
    (:attr:`addresses`) and the lifecycle below.
    """

    def __init__(
        self,
        settings: ServiceSettings | None = None,
        *,
        clock: Callable[[], int] = now_us,
        timezone: tzinfo | None = None,
        **injected: Unpack[Injected],
    ) -> None:
        given = settings or ServiceSettings()
        p: ServiceParts = build_parts(given, clock=clock, timezone=timezone, injected=injected)
        self.parts = p
        self.addresses = ServiceAddresses(p, lambda: self._stack is not None)
        self.settings, self.device, self.backends = p.settings, p.device, p.backends
        self.llm, self.models, self.runtime = p.llm, p.models, p.runtime
        self.hub, self.store = p.hub, p.store
        self.sessions, self.context, self.answers = p.sessions, p.context, p.answers
        self.conversation, self.notes, self.decisions = p.conversation, p.notes, p.decisions
        self.router, self.voice, self.warmer = p.router, p.voice, p.warmer
        self.speculator, self.gateway, self.tls = p.speculator, p.gateway, p.tls
        self.websocket, self.wyoming = p.websocket, p.wyoming
        self.instance_name, self.wyoming_host = p.instance_name, p.wyoming_host
        self.profile_name, self.tls_fingerprint = p.profile_name, p.tls_fingerprint
        self.placement, self.describe = self.addresses.placement, self.addresses.describe
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def token(self) -> str | None:
        """The device access token clients must present now (None: none needed)."""
        return self.parts.token

    @property
    def mdns(self) -> MdnsAdvertiser | None:
        """The mDNS advertiser while the service advertises (None otherwise)."""
        return self.addresses.mdns

    @property
    def websocket_url(self) -> str:
        return self.addresses.websocket_url

    @property
    def console_url(self) -> str:
        """The browser console's URL, with the device token in it when one is needed."""
        return self.addresses.console_url

    @property
    def local_console_url(self) -> str | None:
        """The console's URL on the device itself (``localhost``), or None."""
        return self.addresses.local_console_url

    @property
    def wyoming_uri(self) -> str | None:
        return self.addresses.wyoming_uri

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> EdgeService:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self, *, preload: bool = True, listen: bool = True) -> None:
        """Load models (``preload``), start every part, then listen and advertise
        (``listen=False``: no servers and no mDNS, for in-process use such as ``edge talk``)."""
        if self._stack is not None:
            raise RuntimeError("the service is already running")
        if listen:  # before any model loads: a second `edge serve` fails at once
            check_port_free(self.settings.host, self.settings.port, "WebSocket")
            if self.wyoming is not None:
                check_port_free(self.wyoming_host, self.settings.wyoming_port, "Wyoming")
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        try:
            stack.push_async_callback(self.llm.close)  # last out
            if preload:
                if isinstance(self.llm, Loadable):
                    await self.llm.load()
                for warning in getattr(self.placement(), "warnings", []):
                    log.warning("%s", warning)  # GPU layers asked for, none offloaded
            await stack.enter_async_context(self.warmer)  # cancelled before llm.close
            await stack.enter_async_context(self.answers)  # speculations cancelled on stop
            await stack.enter_async_context(self.speculator)
            await stack.enter_async_context(self.backends.running())  # auto: found over mDNS
            if self.voice is not None:
                await stack.enter_async_context(self.voice)  # outlives the runtime
                if preload:
                    await self.voice.load()
                self.gateway.audio_out_rate = (
                    self.voice.config.output_rate or self.voice.tts.sample_rate
                )
            await stack.enter_async_context(self.runtime)
            stack.callback(self.store.close)  # after the context manager's last write
            await stack.enter_async_context(self.context)  # closed before runtime stop
            await stack.enter_async_context(self.sessions.retention_task(self.hub.connected))
            await stack.enter_async_context(
                self.sessions.forgotten_watch(self.hub.connected, self.hub.end)
            )

            stack.push_async_callback(self.conversation.close)
            await stack.enter_async_context(self.router)  # router.stop() first
            if preload:
                await (
                    self.router.prepare_decisions()
                )  # the routing prompt's option prefix, evaluated once now
                await self.warmer.warm_shared()  # the conversation's system prompt, once
            if not listen:
                return
            if self.tls is not None:
                await stack.enter_async_context(self.tls.renewing())
            await stack.enter_async_context(self.websocket)
            if self.wyoming is not None:
                await stack.enter_async_context(self.wyoming)
            if self.settings.mdns:
                self.addresses.mdns = self.addresses.advertiser()
                await stack.enter_async_context(self.addresses.mdns)
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise

    async def stop(self) -> None:
        """Stop in the order of the module docstring; safe to call twice."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
