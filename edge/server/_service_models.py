"""The models :class:`~edge.server.EdgeService` runs: the device configuration that sizes
them, the LLM, the voice pipeline's speech models, and the names it reports for them."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edge.llm import LLMService

from ._hub import OutputHub
from ._remote_speech import Backends, profile_remotes
from ._settings import ServiceSettings

if TYPE_CHECKING:
    from edge.voice import SpeechToText, TextToSpeech, VoiceConfig


@dataclass(frozen=True)
class SpeechParts:
    """The voice pipeline's parts a caller may give :class:`~edge.server.EdgeService`
    instead of the device profile's (tests pass fake speech models and VAD): the speech
    models, the voice config and the VAD factory; each one left None is built as without
    it."""

    stt: SpeechToText | None = None
    tts: TextToSpeech | None = None
    config: VoiceConfig | None = None
    vad_factory: Callable[[], Any] | None = None


def instance_name(settings: ServiceSettings) -> str:
    """The mDNS instance name."""
    return settings.service_name or f"edge on {socket.gethostname()}"


def load_device(
    settings: ServiceSettings, device: Any, llm: Any, stt: Any, tts: Any
) -> tuple[ServiceSettings, Any]:
    """The device configuration (see :class:`~edge.server.EdgeService` for when it is
    loaded) and the settings with its profile's remote models; its models must be
    installed for the parts not injected."""
    s = settings
    if device is None and (llm is None or s.profile):
        from edge.device import load_device_config

        device = load_device_config(s.profile)
    if device is not None:
        s = profile_remotes(s, device.profile.remote)
        local = s.fallback == "local"
        _check_models(
            device,
            llm=llm is None and not s.llm_url,
            stt=stt is None and s.voice and (not s.stt_url or local),
            tts=tts is None and s.voice and (not s.tts_url or local),
        )
    return s, device


def make_llm(s: ServiceSettings, device: Any) -> LLMService:
    if s.llm_url:
        from edge.llm import OpenAICompatLLM

        kwargs: dict[str, Any] = {"model": s.llm_model}
        if device is not None:
            kwargs["default_max_tokens"] = device.budgets.reserved_output_tokens
        return OpenAICompatLLM(s.llm_url, **kwargs)
    from edge.llm import LlamaCppLLM

    if device is None:
        return LlamaCppLLM()
    return LlamaCppLLM(device.llm_model_path, device.llm_config())


def model_names(settings: ServiceSettings, device: Any) -> dict[str, str]:
    names: dict[str, str] = {}
    if device is not None:
        names = {role: entry.id for role, entry in device.models.items()}
    if settings.llm_url:
        names["llm"] = f"{settings.llm_model or 'remote'} @ {settings.llm_url}"
    for role in ("stt", "tts"):
        if url := getattr(settings, f"{role}_url"):
            names[role] = f"Wyoming {url}"
    return names


def make_voice(
    settings: ServiceSettings,
    device: Any,
    backends: Backends,
    hub: OutputHub,
    injected: SpeechParts,
) -> Any:
    """The voice pipeline (None with ``voice`` off): the ``injected`` speech models, voice
    config and VAD factory, or the profile's, sized to the device."""
    if not settings.voice:
        return None
    from edge.voice import PiperTTS, VoiceConfig, VoicePipeline, WhisperSTT

    stt, tts, voice_config = injected.stt, injected.tts, injected.config
    paths = device.model_paths if device is not None else {}
    audio = device.profile.audio if device is not None else None
    remote_stt, remote_tts = backends.speech_models(  # --stt-url / --tts-url
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
        vad_factory=injected.vad_factory,
        wants_audio=hub.wants_audio,
    )


def _local_stt(device: Any, whisper: Any, paths: dict[str, Any], audio: Any) -> Any:
    """Whisper in this process, sized to the device (its cores, compute type, beam)."""
    from edge.voice import SttSettings

    settings: dict[str, Any] = {}
    if audio is not None:
        from edge.device import whisper_cuda

        cpu_only = device.hardware is not None and not device.hardware.cuda
        stt_settings = SttSettings.for_device(
            audio,
            threads=device.stt_threads,
            cpu_only=cpu_only,
            cuda=not cpu_only and whisper_cuda(),
        )
        settings = stt_settings.model_dump()
    return whisper(paths.get("stt"), **settings)


def _check_models(device: Any, **needed: bool) -> None:
    """The profile's models must be installed: raise ``ModelMissingError`` (it names the
    package or path) rather than run another model on this profile's budgets."""
    for role, need in needed.items():
        if need and device.model_paths.get(role) is None:
            device.models[role].locate()
