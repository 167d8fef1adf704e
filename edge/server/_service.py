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
from collections.abc import Callable
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

from edge.conversation import (
    SYSTEM_PROMPT_KEY,
    Conversation,
    ConversationConfig,
)
from edge.decisions import DecisionService, LocalDecisionService
from edge.interaction import (
    VOICE_OUTPUT_TOPIC,
)
from edge.llm import LLMService, Loadable
from edge.notes import NotesAgent, StoredDrafts
from edge.runtime import AgentRuntime, now_us
from edge.speculation import TurnSpeculator, speculative_answers
from edge.store import private_dir

from ._hub import OutputHub
from ._mdns import (
    MdnsAdvertiser,
)
from ._ports import check_port_free
from ._remote_speech import Backends
from ._reply_length import sentence_bound
from ._service_addresses import ServiceAddresses
from ._service_parts import ServiceParts
from ._settings import ServiceSettings

if TYPE_CHECKING:
    from edge.device import DeviceConfig
    from edge.voice import SpeechToText, TextToSpeech, VoiceConfig

log = logging.getLogger(__name__)


def _reply_bound(sentences: int | None) -> int | Literal["instructions"] | None:
    """The conversation's ``max_sentences`` for the ``reply_sentences`` setting."""
    if sentences is None:
        return "instructions"
    return sentences or None


class Injected(TypedDict, total=False):
    """Parts a caller may give :class:`EdgeService` instead of those it builds (tests pass a
    ``ScriptedLLM``, ``ScriptedDecisions`` and fake speech models)."""

    llm: LLMService | None
    decisions: DecisionService | None
    device: DeviceConfig | None
    stt: SpeechToText | None
    tts: TextToSpeech | None
    voice_config: VoiceConfig | None
    vad_factory: Callable[[], Any] | None


class EdgeService(ServiceParts, ServiceAddresses):
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
        clock: Callable[[], int] = now_us,
        timezone: tzinfo | None = None,
        **injected: Unpack[Injected],
    ) -> None:
        self.settings = settings or ServiceSettings()
        if self.settings.durable_sessions or not (self.settings.insecure or self.settings.token):
            private_dir(self.settings.data_dir)  # 0700, every file 0600: checked at start
        self._clock = clock
        self._timezone = timezone
        llm, stt, tts = injected.get("llm"), injected.get("stt"), injected.get("tts")
        self.device = self._load_device(injected.get("device"), llm, stt, tts)
        self.backends = Backends(self.settings, self.instance_name)  # remote models' health
        self.llm: LLMService = llm if llm is not None else self._make_llm()
        self.models = self._model_names()
        self.runtime = AgentRuntime(clock)
        self.hub = OutputHub()
        self.context = self._make_context()
        # a satellite's answers are a sentence or two, ended as the model writes them;
        # answers may start before the endpoint (a bounded one is prepared whole)
        bounded = sentence_bound(self.llm, {"wyoming:": self.settings.wyoming_reply_sentences})
        self.answers = speculative_answers(bounded, whole_ahead=bounded.bounded)
        self._make_agents(injected.get("decisions"))
        self._vad_factory = injected.get("vad_factory")
        self.voice = self._make_voice(stt, tts, injected.get("voice_config"), self._vad_factory)
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
        self._token = self._access_token()
        self.tls = self._make_tls()  # before any model loads: a bad certificate fails fast
        self.websocket = self._make_websocket()
        self.wyoming = self._make_wyoming()
        self.mdns: MdnsAdvertiser | None = None
        self._stack: contextlib.AsyncExitStack | None = None

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
