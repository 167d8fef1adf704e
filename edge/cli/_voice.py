"""``edge say``, ``edge transcribe`` and ``edge talk``: the voice layer from the shell."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import anyio
import numpy as np
from rich.console import Console


def register(subparsers: argparse._SubParsersAction) -> None:
    say = subparsers.add_parser("say", help="speak text with the Piper voice into a WAV file")
    say.add_argument("text", help="what to say")
    say.add_argument("-o", "--output", required=True, help="WAV file to write")
    say.add_argument("--voice", help="a Piper .onnx voice (default: the catalogue's)")
    say.add_argument("--rate", type=int, help="sample rate of the file (default: the voice's)")
    say.set_defaults(func=run_say)

    tr = subparsers.add_parser("transcribe", help="transcribe a WAV file (utterance by utterance)")
    tr.add_argument("file", help="a PCM16 WAV file, any rate, mono or stereo")
    tr.add_argument("--model", help="a faster-whisper model directory (default: catalogue's)")
    tr.add_argument(
        "--whole",
        action="store_true",
        help="transcribe the file in one pass instead of splitting it at pauses",
    )
    tr.set_defaults(func=run_transcribe)

    talk = subparsers.add_parser(
        "talk", help="play a recorded question through the whole voice loop, write the answer"
    )
    talk.add_argument("file", help="a PCM16 WAV file with the spoken question")
    talk.add_argument("-o", "--output", default="answer.wav", help="WAV file for the answer")
    talk.add_argument(
        "--fast",
        action="store_true",
        help="feed the audio as fast as possible instead of in real time",
    )
    talk.add_argument(
        "--profile", help="device profile name or TOML path (default: detected, as edge serve)"
    )
    talk.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it")
    talk.set_defaults(func=run_talk)


# -- say -------------------------------------------------------------------------------


def run_say(args: argparse.Namespace) -> int:
    from edge.voice import NothingToSpeakError, PiperTTS, TextToSpeechError, resample, write_wav

    console = Console(stderr=True)
    tts = PiperTTS(args.voice)
    try:
        result = tts.synthesize(args.text)
    except NothingToSpeakError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    except (TextToSpeechError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    rate = args.rate or result.sample_rate
    write_wav(args.output, resample(result.audio, result.sample_rate, rate), rate)
    console.print(
        f"[dim]{result.duration_s:.2f} s of speech at {rate} Hz in {result.elapsed_s:.2f} s "
        f"(real-time factor {result.rtf:.3f}) → {args.output}[/]"
    )
    return 0


# -- transcribe --------------------------------------------------------------------------


def _utterances(audio16: np.ndarray) -> list[np.ndarray]:
    from edge.voice import Endpointer, SileroVAD, UtteranceEnded

    vad, endpointer = SileroVAD(), Endpointer()
    padded = np.concatenate([audio16, np.zeros(16_000, np.float32)])
    events = endpointer.feed(padded, vad.process(padded))
    return [e.audio for e in events if isinstance(e, UtteranceEnded)]


def run_transcribe(args: argparse.Namespace) -> int:
    from edge.voice import AudioFormatError, SpeechToTextError, WhisperSTT, read_wav, resample

    console = Console(stderr=True)
    try:
        wav = read_wav(Path(args.file))
    except AudioFormatError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if wav.duration_s == 0:
        console.print(f"[red]error:[/] {args.file} holds no audio")
        return 2
    audio16 = resample(wav.audio, wav.sample_rate, 16_000)
    stt = WhisperSTT(args.model)
    started = time.perf_counter()
    pieces = [audio16] if args.whole else _utterances(audio16)
    if not pieces:
        console.print("[yellow]no speech found[/]")
        return 1
    try:
        texts = [stt.transcribe(piece).text for piece in pieces]
    except (SpeechToTextError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    elapsed = time.perf_counter() - started
    for text in texts:
        if text:
            print(text)
    console.print(
        f"[dim]{wav.duration_s:.2f} s of audio, {len(pieces)} utterance(s), "
        f"{elapsed:.2f} s (real-time factor {elapsed / wav.duration_s:.3f}, model loading "
        "included)[/]"
    )
    return 0 if any(texts) else 1


# -- talk --------------------------------------------------------------------------------


async def _talk(args: argparse.Namespace, console: Console) -> int:
    from edge.server import EdgeService, ServiceSettings
    from edge.voice import AudioFormatError, SimulatedSpeaker, read_wav, write_wav

    try:
        wav = read_wav(Path(args.file))
    except AudioFormatError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    settings = ServiceSettings(
        host="127.0.0.1", wyoming_port=None, mdns=False, profile=args.profile
    )
    service = EdgeService(settings)  # the same composition as `edge serve`, without sockets
    assert service.voice is not None
    voice = service.voice
    client = SimulatedSpeaker("talk")
    service.runtime.register("client", client)
    service.hub.attach(client.participant_id, client)
    console.print(f"[dim]profile {service.profile_name}; loading models…[/]")
    await service.start(listen=False)
    try:
        await service.gateway.join(client.participant_id, "edge talk", source="talk")
        console.print(
            f"[dim]speaking {wav.duration_s:.1f} s of audio "
            f"{'fast' if args.fast else 'in real time'}…[/]"
        )
        await client.speak(service.runtime, wav.audio, wav.sample_rate, realtime=not args.fast)
        try:
            answer = await client.answer(limit_s=args.timeout)
        except TimeoutError:
            heard = [t for t in client.final_transcripts if t]
            console.print(
                f"[red]no spoken answer within {args.timeout:.0f} s[/] "
                f"(heard: {heard or 'no speech'})"
            )
            return 1
        listener, _ = voice.session(client.participant_id)
    finally:
        await service.stop()
    print(f"you said: {' / '.join(t for t in client.final_transcripts if t)}")
    print(f"answer:   {' '.join(answer.texts)}")
    write_wav(args.output, answer.audio, answer.sample_rate)
    if answer.first_audio_at is not None and listener.stats:
        endpoint = listener.stats[-1].speech_end_at
        silence = voice.config.vad.end_silence_ms / 1000
        # the endpoint, not the end of speech: benchmarks/voice_latency.py measures that
        # from the audio itself (benchmarks/README.md)
        console.print(
            f"[dim]endpoint ({silence:.1f} s of silence after the speech) → first answer "
            f"audio {answer.first_audio_at - endpoint:.2f} s; "
            f"{answer.duration_s:.1f} s of answer → {args.output}[/]"
        )
    return 0


def run_talk(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    return anyio.run(_talk, args, console)
