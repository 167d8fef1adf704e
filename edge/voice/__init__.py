"""Voice in and out: VAD and endpointing, streaming STT, sentence-streamed TTS, barge-in.

Audio enters on :data:`AUDIO_INPUT_TOPIC` as PCM16 chunks; the :class:`VoicePipeline`
agent detects speech (Silero VAD on onnxruntime), transcribes it (faster-whisper),
publishes partial and final :class:`Transcript` messages and a ``UserQuery`` per
utterance, speaks ``ResponseOutput`` replies from ``VOICE_OUTPUT_TOPIC`` sentence by
sentence (Piper) and publishes the speech on :data:`AUDIO_OUTPUT_TOPIC`.

Example::

    runtime = AgentRuntime()
    voice = VoicePipeline()
    runtime.register("voice", voice)
    async with voice, runtime:
        await voice.load()
        await runtime.publish(AUDIO_INPUT_TOPIC, AudioInput(pcm=..., sample_rate=16000),
                              participant_id="p1")
"""

from ._audio import (
    STT_RATE,
    AudioFormatError,
    StreamResampler,
    WavAudio,
    check_format,
    chunk_pcm,
    float_to_pcm16,
    pcm16_to_float,
    read_wav,
    resample,
    wav_bytes,
    write_wav,
)
from ._config import AudioProfile, SttSettings, VadConfig, VoiceConfig
from ._endpoint import Endpointer, SpeechPaused, SpeechResumed, SpeechStarted, UtteranceEnded
from ._fallback import FallbackSTT, FallbackTTS
from ._listener import Listener, UtteranceStats
from ._messages import (
    AUDIO_INPUT_TOPIC,
    AUDIO_OUTPUT_TOPIC,
    END_OF_UTTERANCE_TOPIC,
    HOLD_FLOOR_TOPIC,
    SPECULATION_TOPIC,
    SPEECH_BEGAN_TOPIC,
    SPEECH_FAILED_TOPIC,
    TRANSCRIPT_TOPIC,
    AudioInput,
    AudioOutput,
    EndOfUtterance,
    HoldFloor,
    Speculation,
    SpeechBegan,
    SpeechFailed,
    Transcript,
)
from ._pause import Pass, PassCost, PassTimeoutError, PauseRecognizer, Recognizer
from ._pipeline import VoicePipeline, VoiceTopics
from ._recording import Recording, RecordingFullError, RecordingPauses
from ._remote import (
    DEGRADED_FOR_S,
    REMOTE_ERRORS,
    RemoteBackend,
    RemoteSpeechError,
    RemoteSpeechMismatch,
    parse_wyoming_url,
)
from ._remote_stt import WyomingSTT, pick_asr
from ._remote_tts import WyomingTTS, pick_voice
from ._sentences import SentenceSplitter, first_piece, sounds_complete, speakable
from ._simulated_speaker import Answer, SimulatedSpeaker
from ._speaker import ROUTER_SOURCE, Speaker
from ._stt import (
    FullWindowSpeechToText,
    Recognition,
    SpeechToText,
    SpeechToTextError,
    StreamingSpeechToText,
    WhisperSTT,
)
from ._tts import (
    NothingToSpeakError,
    PiperTTS,
    StreamingTextToSpeech,
    Synthesis,
    TextToSpeech,
    TextToSpeechError,
)
from ._vad import SileroVAD, VadModelMissingError, default_vad_path

__all__ = [
    "AUDIO_INPUT_TOPIC",
    "AUDIO_OUTPUT_TOPIC",
    "DEGRADED_FOR_S",
    "END_OF_UTTERANCE_TOPIC",
    "HOLD_FLOOR_TOPIC",
    "REMOTE_ERRORS",
    "ROUTER_SOURCE",
    "SPECULATION_TOPIC",
    "SPEECH_BEGAN_TOPIC",
    "SPEECH_FAILED_TOPIC",
    "STT_RATE",
    "TRANSCRIPT_TOPIC",
    "Answer",
    "AudioFormatError",
    "AudioInput",
    "AudioOutput",
    "AudioProfile",
    "EndOfUtterance",
    "Endpointer",
    "FallbackSTT",
    "FallbackTTS",
    "FullWindowSpeechToText",
    "HoldFloor",
    "Listener",
    "NothingToSpeakError",
    "Pass",
    "PassCost",
    "PassTimeoutError",
    "PauseRecognizer",
    "PiperTTS",
    "Recognition",
    "Recognizer",
    "Recording",
    "RecordingFullError",
    "RecordingPauses",
    "RemoteBackend",
    "RemoteSpeechError",
    "RemoteSpeechMismatch",
    "SentenceSplitter",
    "SileroVAD",
    "SimulatedSpeaker",
    "Speaker",
    "Speculation",
    "SpeechBegan",
    "SpeechFailed",
    "SpeechPaused",
    "SpeechResumed",
    "SpeechStarted",
    "SpeechToText",
    "SpeechToTextError",
    "StreamResampler",
    "StreamingSpeechToText",
    "StreamingTextToSpeech",
    "SttSettings",
    "Synthesis",
    "TextToSpeech",
    "TextToSpeechError",
    "Transcript",
    "UtteranceEnded",
    "UtteranceStats",
    "VadConfig",
    "VadModelMissingError",
    "VoiceConfig",
    "VoicePipeline",
    "VoiceTopics",
    "WavAudio",
    "WhisperSTT",
    "WyomingSTT",
    "WyomingTTS",
    "check_format",
    "chunk_pcm",
    "default_vad_path",
    "first_piece",
    "float_to_pcm16",
    "parse_wyoming_url",
    "pcm16_to_float",
    "pick_asr",
    "pick_voice",
    "read_wav",
    "resample",
    "sounds_complete",
    "speakable",
    "wav_bytes",
    "write_wav",
]
