"""How :class:`~edge.server.EdgeService` builds its parts, in the order of
``docs/architecture.md``: the device configuration, the LLM, the context manager over the
sessions store, the router, the voice pipeline, the gateway and the network faces. The
service's ``__init__`` calls them one after another; each reads what the earlier ones made.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import replace
from datetime import tzinfo
from typing import Any

from edge import __version__
from edge.conversation import (
    ContextConfig,
    ContextManager,
    Conversation,
    PrefixWarmer,
)
from edge.decisions import DecisionService
from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)
from edge.llm import LLMService
from edge.notes import NOTES_TOPIC, NotesAgent
from edge.routing import AgentRouter, ParticipantHooks, RoutableAgent, RouterConfig, RouterTopics
from edge.runtime import AgentRuntime
from edge.speculation import Guess, SpeculativeAnswers, TurnSpeculator, prefetching
from edge.store import STORE_FILE, Retention, SessionStore
from edge.voice import TRANSCRIPT_TOPIC

from ._access import TokenFile, is_loopback
from ._gateway import Gateway
from ._hub import OutputHub
from ._mdns import (
    advertised_addresses,
    mdns_host_name,
)
from ._remote_speech import Backends, profile_remotes
from ._sessions import Sessions
from ._settings import ServiceSettings
from ._tls import CertificateKeeper, local_names
from ._websocket import AccessPolicy, WebSocketServer
from ._wyoming import WyomingBackend, WyomingLimits, WyomingServer
from ._wyoming_asr import AsrSpeculation

log = logging.getLogger(__name__)


def _days(days: float | None) -> float | None:
    return None if days is None else days * 86_400.0


class ServiceParts:
    """The construction steps of :class:`~edge.server.EdgeService` (a part of it)."""

    settings: ServiceSettings
    device: Any
    llm: LLMService
    models: dict[str, str]
    runtime: AgentRuntime
    hub: OutputHub
    store: SessionStore
    sessions: Sessions
    context: ContextManager
    answers: SpeculativeAnswers
    conversation: Conversation
    notes: NotesAgent | None
    decisions: DecisionService
    router: AgentRouter
    voice: Any
    warmer: PrefixWarmer
    speculator: TurnSpeculator
    gateway: Gateway
    tls: CertificateKeeper | None
    _token: str | TokenFile | None
    _clock: Callable[[], int]
    _timezone: tzinfo | None
    _vad_factory: Any
    backends: Backends

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
        config = self.device.context_config() if self.device is not None else ContextConfig()
        context = ContextManager(
            self.llm,
            config.with_options(
                summary_context_topics=summary,
                incremental_context_topics=incremental,
                timezone=self._timezone,
            ),
            store=self.store,
            clock=self._clock,
        )
        retention = Retention(
            history_bytes=s.session_history_bytes,
            history_age_s=_days(s.session_history_days),
            idle_expiry_s=_days(s.session_idle_days),
            assigned_idle_expiry_s=_days(s.session_assigned_idle_days),
        )
        self.sessions = Sessions(self.store, context, retention)
        return context

    def _make_router(self) -> AgentRouter:
        destinations: dict[str, RoutableAgent] = {"conversation": self.conversation}
        if self.notes is not None:
            destinations[self.notes.route_name] = self.notes
        config = self.device.router_config() if self.device is not None else RouterConfig()
        topics = RouterTopics(
            query=USER_QUERY_TOPIC,
            output=VOICE_OUTPUT_TOPIC,
            joined=PARTICIPANT_JOINED_TOPIC,
            left=PARTICIPANT_LEFT_TOPIC,
            interrupted=INTERRUPTED_TOPIC,
        )
        return AgentRouter(
            destinations,
            prefetching(self.decisions),  # a turn's decision may be asked early
            replace(config, default_destination="conversation", topics=topics),
            dialogue=self.conversation.dialogue,  # the context manager owns the dialogue
            # a departure suspends the context; forget erases it
            hooks=ParticipantHooks(
                cleanup=self.context.suspend, status=self.hub.status, failed=self.hub.turn_failed
            ),
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
            llm=self.llm,
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
            provisional=self._wyoming_provisional if self.settings.speculative_answers else None,
        )
        self.speculator.speech.append(backend.prepared)  # a likely answer's first sentence
        return WyomingServer(backend, self.wyoming_host, s.wyoming_port, allow=s.wyoming_allow)

    def _wyoming_provisional(self, participant_id: str, text: str) -> None:
        """An ``asr`` recording's words for an active Home Assistant conversation: its
        answer starts now and the ``handle`` bringing the same words adopts it."""
        guess = Guess(participant_id, text)
        self.speculator.provisional(participant_id, guess, by_query=True)

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

        if self.device is None:
            return LlamaCppLLM()
        return LlamaCppLLM(self.device.llm_model_path, self.device.llm_config())

    def _model_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        if self.device is not None:
            names = {role: entry.id for role, entry in self.device.models.items()}
        if self.settings.llm_url:
            names["llm"] = f"{self.settings.llm_model or 'remote'} @ {self.settings.llm_url}"
        for role in ("stt", "tts"):
            if url := getattr(self.settings, f"{role}_url"):
                names[role] = f"Wyoming {url}"
        return names

    def _make_voice(self, stt: Any, tts: Any, voice_config: Any, vad_factory: Any) -> Any:
        """The voice pipeline (None with ``voice`` off): the injected speech models or the
        profile's, sized to the device."""
        if not self.settings.voice:
            return None
        from edge.voice import PiperTTS, VoiceConfig, VoicePipeline, WhisperSTT

        device = self.device
        paths = device.model_paths if device is not None else {}
        audio = device.profile.audio if device is not None else None
        remote_stt, remote_tts = self.backends.speech_models(  # --stt-url / --tts-url
            lambda: _local_stt(device, WhisperSTT, paths, audio), lambda: PiperTTS(paths.get("tts"))
        )
        stt = stt if stt is not None else remote_stt
        tts = tts if tts is not None else remote_tts
        if stt is None:
            stt = _local_stt(device, WhisperSTT, paths, audio)
        if tts is None:
            tts = PiperTTS(paths.get("tts"))
        if voice_config is None and audio is not None:
            voice_config = VoiceConfig.for_device(audio)
        return VoicePipeline(
            stt=stt,
            tts=tts,
            config=voice_config,
            vad_factory=vad_factory,
            wants_audio=self.hub.wants_audio,
        )


def _local_stt(device: Any, whisper: Any, paths: dict[str, Any], audio: Any) -> Any:
    """Whisper in this process, sized to the device (its cores, compute type, beam)."""
    from edge.voice import SttSettings

    settings: dict[str, Any] = {}
    if audio is not None:
        from edge.device import whisper_cuda

        cpu_only = device.hardware is not None and not device.hardware.cuda
        stt_settings = SttSettings.for_device(
            audio, threads=device.threads, cpu_only=cpu_only, cuda=not cpu_only and whisper_cuda()
        )
        settings = stt_settings.model_dump()
    return whisper(paths.get("stt"), **settings)


def _check_models(device: Any, **needed: bool) -> None:
    """The profile's models must be installed: raise ``ModelMissingError`` (it names the
    package or path) rather than run another model on this profile's budgets."""
    for role, need in needed.items():
        if need and device.model_paths.get(role) is None:
            device.models[role].locate()
