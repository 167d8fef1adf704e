"""``EdgeService``: the whole product in one runtime, with a lifecycle you can see.

The packages, the topics between them and the data flow of a spoken turn are drawn once,
in ``docs/architecture.md``; the construction below follows it step by step.

Startup: the LLM and the voice models load, the voice pipeline and runtime start, the
context manager and router open, then the servers listen and mDNS advertises them.
Shutdown is the reverse: mDNS withdrawn, servers closed (each session publishes its
departure), ``router.stop()``, ``conversation.close()``, ``context.close()``, runtime
stop, voice pipeline stop, pending warm-ups cancelled, ``llm.close()``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable
from datetime import tzinfo
from typing import Any, Literal
from urllib.parse import quote

from edge import __version__
from edge.conversation import ContextManager, Conversation
from edge.decisions import DecisionService, LocalDecisionService, PrefetchingDecisions
from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)
from edge.llm import LLMService, Loadable, SpeculativeLLM
from edge.notes import NOTES_TOPIC, NotesAgent, StoredDrafts
from edge.routing import AgentRouter, RoutableAgent
from edge.runtime import AgentRuntime, now_us
from edge.store import STORE_FILE, Retention, SessionStore, private_dir
from edge.voice import TRANSCRIPT_TOPIC

from ._access import TokenFile, is_loopback
from ._gateway import Gateway
from ._hub import OutputHub
from ._mdns import (
    WEBSOCKET_SERVICE,
    WYOMING_SERVICE,
    MdnsAdvertiser,
    advertised_addresses,
    mdns_host_name,
)
from ._ports import check_port_free
from ._protocol import PROTOCOL_VERSION
from ._remote_speech import Backends, profile_remotes
from ._sessions import Sessions
from ._settings import ServiceSettings
from ._speculation import TurnSpeculator
from ._tls import CertificateKeeper, local_names
from ._warmup import SYSTEM_PROMPT_KEY, PrefixWarmer
from ._websocket import AccessPolicy, WebSocketServer
from ._wyoming import WyomingBackend, WyomingLimits, WyomingServer
from ._wyoming_asr import AsrSpeculation

log = logging.getLogger(__name__)

WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # every interface: shown as the host name


def _days(days: float | None) -> float | None:
    return None if days is None else days * 86_400.0


def _reply_bound(sentences: int | None) -> int | Literal["instructions"] | None:
    """The conversation's ``max_sentences`` for the ``reply_sentences`` setting."""
    if sentences is None:
        return "instructions"
    return sentences or None


class EdgeService:
    """The service ``edge serve`` runs; ``async with EdgeService(settings) as service:``.

    Parts can be injected (tests pass a ``ScriptedLLM``, ``ScriptedDecisions`` and fake
    ``stt`` / ``tts`` / ``vad_factory``). Without an injected ``llm`` the device
    configuration is loaded (profile from ``settings.profile``, ``EDGE_PROFILE`` or
    detection) and sizes the LLM, the context manager and the router; with one, it is
    loaded only when a profile is named or a ``device`` config is given. ``clock`` (wall
    time in microseconds) and ``timezone`` are what the runtime, the store, the context
    manager and the conversation record and show times with (the system clock and the
    local zone by default).
    """

    def __init__(
        self,
        settings: ServiceSettings | None = None,
        *,
        llm: LLMService | None = None,
        decisions: DecisionService | None = None,
        device: Any = None,
        stt: Any = None,
        tts: Any = None,
        voice_config: Any = None,
        vad_factory: Any = None,
        clock: Callable[[], int] = now_us,
        timezone: tzinfo | None = None,
    ) -> None:
        self.settings = settings or ServiceSettings()
        if self.settings.durable_sessions or not (self.settings.insecure or self.settings.token):
            private_dir(self.settings.data_dir)  # 0700, every file 0600: checked at start
        self._clock = clock
        self._timezone = timezone
        self.device = self._load_device(device, llm, stt, tts)
        self.backends = Backends(self.settings, self.instance_name)  # remote models' health
        self.llm: LLMService = llm if llm is not None else self._make_llm()
        self.models = self._model_names()
        self.runtime = AgentRuntime(clock)
        self.hub = OutputHub()
        self.context = self._make_context()
        self.answers = SpeculativeLLM(self.llm)  # answers may start before the endpoint
        self.conversation = Conversation(
            self.answers,
            context=self.context,
            instructions=self.settings.instructions,
            runtime=self.runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            clock=clock,
            seed_key=SYSTEM_PROMPT_KEY,
            max_sentences=_reply_bound(self.settings.reply_sentences),
        )
        self.notes = (
            NotesAgent(
                self.runtime, output_topic=VOICE_OUTPUT_TOPIC, drafts=StoredDrafts(self.store)
            )
            if self.settings.notes
            else None
        )
        self.decisions = decisions if decisions is not None else LocalDecisionService(self.llm)
        if isinstance(self.decisions, LocalDecisionService):
            self.sessions.on_forget.append(self.decisions.forget)
        self.router = self._make_router()
        self.voice = (
            self._make_voice(stt, tts, voice_config, vad_factory) if self.settings.voice else None
        )
        self._vad_factory = vad_factory
        self.backends.watch(self.voice, self.llm)
        self.warmer = PrefixWarmer(
            self.llm, lambda: self.conversation.system_message, shared_key=SYSTEM_PROMPT_KEY
        )
        self.speculator = TurnSpeculator(
            self.router,
            self.conversation,
            self.answers,
            prepare_speech=self.voice.prepare_reply if self.voice is not None else None,
        )
        self._register_agents()
        self.gateway = self._make_gateway()
        self._token = self._access_token()
        self.tls = self._make_tls()  # before any model loads: a bad certificate fails fast
        self.websocket = self._make_websocket()
        self.wyoming = self._make_wyoming()
        self.mdns: MdnsAdvertiser | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    # -- construction helpers -----------------------------------------------------------

    @property
    def profile_name(self) -> str | None:
        return self.device.profile.name if self.device is not None else None

    def _access_token(self) -> str | TokenFile | None:
        """The device access token WebSocket clients must present (None: ``insecure``);
        the data directory's file is followed as it changes (``edge token --rotate``)."""
        s = self.settings
        if s.insecure:
            return None
        if s.token is not None and s.token.get_secret_value():
            return s.token.get_secret_value()
        return TokenFile(s.data_dir)

    @property
    def token(self) -> str | None:
        """The device access token clients must present now (None: none needed)."""
        return self._token.current() if isinstance(self._token, TokenFile) else self._token

    @property
    def instance_name(self) -> str:
        """The mDNS instance name."""
        return self.settings.service_name or f"edge on {socket.gethostname()}"

    def _make_tls(self) -> CertificateKeeper | None:
        """The certificate served on the WebSocket port (None: ``--no-tls``)."""
        s = self.settings
        if not s.tls:
            return None
        names = local_names(
            mdns_host_name(self.instance_name), advertised_addresses(s.host, s.mdns_interfaces)
        )
        return CertificateKeeper(s.data_dir, names, cert_file=s.tls_cert, key_file=s.tls_key)

    @property
    def tls_fingerprint(self) -> str | None:
        """SHA-256 of the served certificate's public key (None without TLS)."""
        return self.tls.certificate.fingerprint if self.tls is not None else None

    @property
    def wyoming_host(self) -> str:
        """Home Assistant cannot send a token, so Wyoming listens on loopback unless an
        allow-list of client addresses (``wyoming_allow``) is configured."""
        host = self.settings.host
        if self.settings.wyoming_allow or is_loopback(host):
            return host
        return "127.0.0.1"

    def _load_device(self, device: Any, llm: Any, stt: Any, tts: Any) -> Any:
        """The device configuration (see the class docstring for when it is loaded); its
        models must be installed for the parts not injected."""
        s = self.settings
        if device is None and (llm is None or s.profile):
            from edge.device import load_device_config

            device = load_device_config(s.profile)
        if device is not None:
            self.settings = s = profile_remotes(s, device.profile.remote)
            local = s.fallback == "local"
            _check_models(
                device,
                llm=llm is None and not s.llm_url,
                stt=stt is None and s.voice and (not s.stt_url or local),
                tts=tts is None and s.voice and (not s.tts_url or local),
            )
        return device

    @property
    def _context_topics(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(summary topics, incremental topics): the notes topic is incremental."""
        s = self.settings
        notes = (NOTES_TOPIC.name,) if s.notes else ()
        incremental = tuple(dict.fromkeys((*s.incremental_context_topics, *notes)))
        return s.summary_context_topics, incremental

    def _make_context(self) -> ContextManager:
        """The context manager over the sessions store (``self.store``, ``self.sessions``)."""
        s = self.settings
        self.store = SessionStore(
            s.data_dir / STORE_FILE if s.durable_sessions else None, clock=self._clock
        )
        summary, incremental = self._context_topics
        kwargs = self.device.context_manager_kwargs() if self.device is not None else {}
        context = ContextManager(
            self.llm,
            summary_context_topics=summary,
            incremental_context_topics=incremental,
            store=self.store,
            timezone=self._timezone,
            clock=self._clock,
            **kwargs,
        )
        retention = Retention(
            history_bytes=s.session_history_bytes,
            history_age_s=_days(s.session_history_days),
            idle_expiry_s=_days(s.session_idle_days),
        )
        self.sessions = Sessions(self.store, context, retention)
        return context

    def _make_router(self) -> AgentRouter:
        destinations: dict[str, RoutableAgent] = {"conversation": self.conversation}
        if self.notes is not None:
            destinations[self.notes.route_name] = self.notes
        kwargs = self.device.router_kwargs() if self.device is not None else {}
        return AgentRouter(
            destinations,
            PrefetchingDecisions(self.decisions),  # a turn's decision may be asked early
            default_destination="conversation",
            query_topic=USER_QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            participant_joined_topic=PARTICIPANT_JOINED_TOPIC,
            participant_left_topic=PARTICIPANT_LEFT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
            cleanup_participant=self.context.suspend,  # a departure suspends; forget erases
            set_status=self.hub.status,
            **kwargs,
        )

    def _register_agents(self) -> None:
        self.runtime.register("hub", self.hub)
        self.runtime.register("warmer", self.warmer)
        # a participant speaking (a partial transcript every 0.8 s) holds off compaction
        self.runtime.register("context", self.context.subscriber((TRANSCRIPT_TOPIC,)))
        self.runtime.register("router", self.router.runtime_subscriber())
        if self.voice is not None:
            self.runtime.register("voice", self.voice)
            if self.settings.speculative_answers:
                self.runtime.register("speculator", self.speculator)

    def _make_gateway(self) -> Gateway:
        summary, incremental = self._context_topics
        return Gateway(
            self.runtime,
            self.hub,
            context_topics=(*summary, *incremental),
            voice=self.voice is not None,
            server=f"xr-edge {__version__}",
            profile=self.profile_name,
            models=self.models,
            speculation=self.answers.stats,
            sessions=self.sessions,
            backends=self.backends.health,
        )

    def _make_websocket(self) -> WebSocketServer:
        s = self.settings
        return WebSocketServer(
            self.gateway,
            s.host,
            s.port,
            max_sessions=s.max_sessions,
            outbox_size=s.outbox_size,
            access=AccessPolicy(
                token=self._token,
                allowed_origins=s.allowed_origins,
                hello_timeout_s=s.hello_timeout_s,
                max_per_address=s.max_sessions_per_address,
            ),
            tls=self.tls,
        )

    def _make_wyoming(self) -> WyomingServer | None:
        s = self.settings
        if s.wyoming_port is None:
            return None
        backend = WyomingBackend(
            self.gateway,
            stt=self.voice.stt if self.voice is not None else None,
            tts=self.voice.tts if self.voice is not None else None,
            models=self.models,
            version=__version__,
            handle_timeout_s=s.handle_timeout_s,
            limits=WyomingLimits(
                max_connections=s.max_wyoming_connections,
                max_per_address=s.max_sessions_per_address,
                read_timeout_s=s.wyoming_read_timeout_s,
                max_synthesize_chars=s.max_synthesize_chars,
            ),
            speculation=self._wyoming_speculation(),
        )
        return WyomingServer(backend, self.wyoming_host, s.wyoming_port, allow=s.wyoming_allow)

    def _wyoming_speculation(self) -> AsrSpeculation | None:
        """Wyoming ``asr`` transcribes during the client's trailing silence, with the same
        VAD and pause as the voice pipeline's speculative final pass."""
        if self.voice is None or not self.voice.config.speculative_final:
            return None
        from edge.voice import SileroVAD

        config = self.voice.config
        return AsrSpeculation(
            vad_factory=self._vad_factory or SileroVAD,
            threshold=config.vad.threshold,
            after_s=config.speculative_after_ms / 1000,
        )

    def _make_llm(self) -> LLMService:
        s = self.settings
        if s.llm_url:
            from edge.llm import OpenAICompatLLM

            kwargs: dict[str, Any] = {"model": s.llm_model}
            if self.device is not None:
                kwargs["default_max_tokens"] = self.device.budgets.reserved_output_tokens
            return OpenAICompatLLM(s.llm_url, **kwargs)
        from edge.llm import LlamaCppLLM

        kwargs = self.device.llm_kwargs() if self.device is not None else {}
        return LlamaCppLLM(**kwargs)

    def _model_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        if self.device is not None:
            names = {role: entry.id for role, entry in self.device.models.items()}
        if self.settings.llm_url:
            names["llm"] = f"{self.settings.llm_model or 'remote'} @ {self.settings.llm_url}"
        for role in ("stt", "tts"):
            if getattr(self.settings, f"{role}_url"):
                names[role] = f"Wyoming {getattr(self.settings, f'{role}_url')}"
        return names

    def _make_voice(self, stt: Any, tts: Any, voice_config: Any, vad_factory: Any) -> Any:
        from edge.voice import PiperTTS, VadConfig, VoiceConfig, VoicePipeline, WhisperSTT

        paths = self.device.model_paths if self.device is not None else {}
        audio = self.device.profile.audio if self.device is not None else None
        remote_stt, remote_tts = self.backends.speech_models(  # --stt-url / --tts-url
            lambda: self._local_stt(WhisperSTT, paths, audio), lambda: PiperTTS(paths.get("tts"))
        )
        stt = stt if stt is not None else remote_stt
        tts = tts if tts is not None else remote_tts
        if stt is None:
            stt = self._local_stt(WhisperSTT, paths, audio)
        if tts is None:
            tts = PiperTTS(paths.get("tts"))
        if voice_config is None and audio is not None:
            silence = audio.endpoint_silence_ms
            voice_config = VoiceConfig(
                vad=VadConfig(
                    threshold=audio.vad_threshold,
                    end_silence_ms=silence,
                    min_end_silence_ms=min(audio.endpoint_min_silence_ms, silence),
                    max_end_silence_ms=max(audio.endpoint_max_silence_ms, silence),
                    max_utterance_s=max(audio.max_utterance_s, 1.5),
                )
            )
        return VoicePipeline(
            stt=stt,
            tts=tts,
            config=voice_config,
            vad_factory=vad_factory,
            wants_audio=self.hub.wants_audio,
        )

    def _local_stt(self, whisper: Any, paths: dict[str, Any], audio: Any) -> Any:
        extra: dict[str, Any] = {}
        if audio is not None:
            compute = audio.stt_compute_type
            hardware = self.device.hardware
            if "float16" in compute and hardware is not None and not hardware.cuda:
                log.warning("stt_compute_type %s needs CUDA; using int8 on this CPU", compute)
                compute = "int8"
            # Whisper gets the cores the LLM gets (CTranslate2's own default is 4).
            extra = {
                "compute_type": compute,
                "beam_size": audio.stt_beam_size,
                "cpu_threads": self.device.threads,
            }
        return whisper(paths.get("stt"), **extra)

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
                self.mdns = self._advertiser()
                await stack.enter_async_context(self.mdns)
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise

    async def stop(self) -> None:
        """Stop in the order of the module docstring; safe to call twice."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

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

    def describe(self) -> dict[str, Any]:
        """What runs, for ``edge serve`` to print."""
        d = self.device
        return {
            "profile": self.profile_name,
            "chosen_by": d.choice.reason if d is not None else None,
            "models": self.models,
            "llm": type(self.llm).__name__,
            "budgets": {
                **(d.context_manager_kwargs() if d is not None else {}),
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
            "backends": self.backends.banner(),
            "websocket": self.websocket_url if self._stack is not None else None,
            "wyoming": self.wyoming_uri if self._stack is not None else None,
            "mdns": [i.name for i in self.mdns.infos] if self.mdns is not None else [],
            "access": self._access_note(),
            "notes": list(d.notes) if d is not None else [],
        }


def _check_models(device: Any, **needed: bool) -> None:
    """The profile's models must be installed: raise ``ModelMissingError`` (it names the
    package or path) rather than run another model on this profile's budgets."""
    for role, need in needed.items():
        if need and device.model_paths.get(role) is None:
            device.models[role].locate()
