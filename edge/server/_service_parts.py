"""How :class:`~edge.server.EdgeService` builds its parts, in the order of
``docs/architecture.md``: the device configuration, the LLM, the context manager over the
sessions store, the router, the voice pipeline, the gateway and the network faces.
:func:`build_parts` runs the steps one after another (each reads what the earlier ones
made) and returns them as one frozen :class:`ServiceParts`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from edge import __version__
from edge.conversation import (
    SYSTEM_PROMPT_KEY,
    ContextConfig,
    ContextManager,
    Conversation,
    ConversationConfig,
    PrefixWarmer,
)
from edge.decisions import DecisionService, LocalDecisionService
from edge.interaction import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    USER_QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)
from edge.llm import LLMService
from edge.notes import NOTES_TOPIC, NotesAgent, StoredDrafts
from edge.routing import AgentRouter, ParticipantHooks, RoutableAgent, RouterConfig, RouterTopics
from edge.runtime import AgentRuntime
from edge.speculation import (
    Guess,
    SpeculativeAnswers,
    TurnSpeculator,
    prefetching,
    speculative_answers,
)
from edge.store import STORE_FILE, Retention, SessionStore, private_dir
from edge.voice import TRANSCRIPT_TOPIC

from ._access import TokenFile, is_loopback
from ._gateway import Gateway
from ._hub import OutputHub
from ._mdns import (
    advertised_addresses,
    mdns_host_name,
)
from ._remote_speech import Backends
from ._reply_length import sentence_bound
from ._service_models import (
    SpeechParts,
    instance_name,
    load_device,
    make_llm,
    make_voice,
    model_names,
)
from ._sessions import Sessions
from ._settings import ServiceSettings
from ._tls import CertificateKeeper, local_names
from ._websocket import AccessPolicy, WebSocketServer
from ._wyoming import WyomingBackend, WyomingLimits, WyomingServer
from ._wyoming_asr import AsrSpeculation

if TYPE_CHECKING:
    from edge.device import DeviceConfig

log = logging.getLogger(__name__)


def _days(days: float | None) -> float | None:
    return None if days is None else days * 86_400.0


def _reply_bound(sentences: int | None) -> int | Literal["instructions"] | None:
    """The conversation's ``max_sentences`` for the ``reply_sentences`` setting."""
    if sentences is None:
        return "instructions"
    return sentences or None


class Injected(TypedDict, total=False):
    """Parts a caller may give :class:`~edge.server.EdgeService` instead of those it builds
    (tests pass a ``ScriptedLLM``, ``ScriptedDecisions`` and fake speech models in
    :class:`SpeechParts`)."""

    llm: LLMService | None
    decisions: DecisionService | None
    device: DeviceConfig | None
    speech: SpeechParts | None


@dataclass(frozen=True)
class ServiceParts:
    """Everything :class:`~edge.server.EdgeService` runs, built once by :func:`build_parts`
    (``settings`` are those given, with the device profile's remote models)."""

    settings: ServiceSettings
    device: Any
    backends: Backends  # remote models' health
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
    access_token: str | TokenFile | None
    tls: CertificateKeeper | None
    websocket: WebSocketServer
    wyoming: WyomingServer | None

    @property
    def token(self) -> str | None:
        """The device access token clients must present now (None: none needed)."""
        token = self.access_token
        return token.current() if isinstance(token, TokenFile) else token

    @property
    def instance_name(self) -> str:
        """The mDNS instance name."""
        return instance_name(self.settings)

    @property
    def profile_name(self) -> str | None:
        return self.device.profile.name if self.device is not None else None

    @property
    def tls_fingerprint(self) -> str | None:
        """SHA-256 of the served certificate's public key (None without TLS)."""
        return self.tls.certificate.fingerprint if self.tls is not None else None

    @property
    def wyoming_host(self) -> str:
        """Home Assistant cannot send a token, so Wyoming listens on loopback unless an
        allow-list of client addresses (``wyoming_allow``) is configured."""
        return wyoming_host(self.settings)


def wyoming_host(settings: ServiceSettings) -> str:
    host = settings.host
    if settings.wyoming_allow or is_loopback(host):
        return host
    return "127.0.0.1"


def build_parts(
    settings: ServiceSettings,
    *,
    clock: Callable[[], int],
    timezone: tzinfo | None,
    injected: Injected,
) -> ServiceParts:
    """Build every part, in the order of the module docstring."""
    built = _Build(settings, clock, timezone, injected)
    return ServiceParts(**{f.name: getattr(built, f.name) for f in fields(ServiceParts)})


class _Build:
    """One construction of the service's parts: each step reads what the earlier ones
    made; :func:`build_parts` keeps the result, not this."""

    def __init__(
        self,
        settings: ServiceSettings,
        clock: Callable[[], int],
        timezone: tzinfo | None,
        injected: Injected,
    ) -> None:
        if settings.durable_sessions or not (settings.insecure or settings.token):
            private_dir(settings.data_dir)  # 0700, every file 0600: checked at start
        self._clock = clock
        self._timezone = timezone
        llm, speech = injected.get("llm"), injected.get("speech") or SpeechParts()
        self.settings, self.device = load_device(
            settings, injected.get("device"), llm, speech.stt, speech.tts
        )
        self.backends = Backends(self.settings, instance_name(self.settings))
        self.llm: LLMService = llm if llm is not None else make_llm(self.settings, self.device)
        self.models = model_names(self.settings, self.device)
        self.runtime = AgentRuntime(clock)
        self.hub = OutputHub()
        self.context = self._make_context()
        # a satellite's answers are a sentence or two, ended as the model writes them;
        # answers may start before the endpoint (a bounded one is prepared whole)
        bounded = sentence_bound(self.llm, {"wyoming:": self.settings.wyoming_reply_sentences})
        self.answers = speculative_answers(bounded, whole_ahead=bounded.bounded)
        self._make_agents(injected.get("decisions"))
        self._vad_factory = speech.vad_factory
        self.voice = make_voice(self.settings, self.device, self.backends, self.hub, speech)
        self.backends.watch(self.voice, self.llm)
        self.warmer = self.context.prefix_warmer(lambda: self.conversation.system_message)
        self.speculator = TurnSpeculator(
            self.router,
            self.conversation,
            self.answers,
            speech=[self.voice] if self.voice is not None else [],
        )
        self._register_agents()
        self.gateway = self._make_gateway()
        self.access_token = self._access_token()
        self.tls = self._make_tls()  # before any model loads: a bad certificate fails fast
        self.websocket = self._make_websocket()
        self.wyoming = self._make_wyoming()

    def _make_agents(self, decisions: DecisionService | None) -> None:
        """The routed destinations (the conversation, the notes agent) and their router."""
        self.conversation = Conversation(
            self.answers,
            context=self.context,
            config=ConversationConfig(
                instructions=self.settings.instructions,
                seed_key=SYSTEM_PROMPT_KEY,
                max_sentences=_reply_bound(self.settings.reply_sentences),
            ),
            runtime=self.runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            clock=self._clock,
        )
        self.notes = None
        if self.settings.notes:
            drafts = StoredDrafts(self.store)
            self.notes = NotesAgent(self.runtime, output_topic=VOICE_OUTPUT_TOPIC, drafts=drafts)
        self.decisions = decisions if decisions is not None else LocalDecisionService(self.llm)
        if isinstance(self.decisions, LocalDecisionService):
            self.sessions.on_forget.append(self.decisions.forget)
        self.router = self._make_router()

    def _access_token(self) -> str | TokenFile | None:
        """The device access token WebSocket clients must present (None: ``insecure``);
        the data directory's file is followed as it changes (``edge token --rotate``)."""
        s = self.settings
        if s.insecure:
            return None
        if s.token is not None and s.token.get_secret_value():
            return s.token.get_secret_value()
        return TokenFile(s.data_dir)

    def _make_tls(self) -> CertificateKeeper | None:
        """The certificate served on the WebSocket port (None: ``--no-tls``)."""
        s = self.settings
        if not s.tls:
            return None
        names = local_names(
            mdns_host_name(instance_name(s)), advertised_addresses(s.host, s.mdns_interfaces)
        )
        return CertificateKeeper(s.data_dir, names, cert_file=s.tls_cert, key_file=s.tls_key)

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
            profile=self.device.profile.name if self.device is not None else None,
            models=self.models,
            speculation=self.answers.stats,
            sessions=self.sessions,
            backends=self.backends.health,
            llm=self.llm,
            instructions=self.conversation.session_instructions,
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
                token=self.access_token,
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
            recognizer=self.voice.recognizer if self.voice is not None else None,
        )
        self.speculator.speech.append(backend.prepared)  # a likely answer's first sentence
        return WyomingServer(
            backend, wyoming_host(self.settings), s.wyoming_port, allow=s.wyoming_allow
        )

    def _wyoming_provisional(self, participant_id: str, utterance: str, text: str) -> None:
        """An ``asr`` recording's words for an active Home Assistant conversation: its
        answer starts now and the ``handle`` bringing the same words adopts it."""
        guess = Guess(utterance, text)
        self.speculator.provisional(participant_id, guess, by_query=True)

    def _wyoming_speculation(self) -> AsrSpeculation | None:
        """Wyoming ``asr`` transcribes during the client's trailing silence, with the same
        VAD and pause as the voice pipeline's speculative final pass, over the recording
        as its endpoint would cut it: the pass hears what the voice pipeline's would (cut
        where it started, it heard too little after the last word, and Whisper tiny wrote
        "France" as "friends" more often)."""
        if self.voice is None or not self.voice.config.speculative_final:
            return None
        from edge.voice import SileroVAD

        return AsrSpeculation(self._vad_factory or SileroVAD, self.voice.config)
