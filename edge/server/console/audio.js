// Microphone capture (an AudioWorklet resampling to the hello's PCM16 rate) and gapless
// playback of the service's PCM16 reply chunks (each scheduled right after the last).

export const MIC_RATE = 16000;
// One 512-sample frame at 16 kHz: a window of the service's VAD, so the service sees
// the end of speech as soon as the window that shows it has been recorded.
export const FRAME_MS = 32;

/** Why the microphone cannot be used here, as a sentence that says how to fix it. */
export function microphoneProblem() {
  if (!window.isSecureContext) {
    const here = `${location.protocol}//${location.host}`;
    return (
      `The browser only allows the microphone on a secure origin, and ${here} is not one. ` +
      `Open https://${location.host}/ instead: the service serves HTTPS on this port ` +
      "unless it was started with --no-tls (accept its certificate once, after comparing " +
      "its fingerprint with the one `edge token` prints). " +
      "Typed turns work either way."
    );
  }
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    return "This browser offers no microphone access (getUserMedia); type your turns instead.";
  }
  if (!window.AudioWorkletNode) {
    return "This browser has no AudioWorklet, which the console needs to capture speech.";
  }
  return null;
}

/** The sentence to show when getUserMedia fails. */
export function refusalMessage(error) {
  if (error && (error.name === "NotAllowedError" || error.name === "SecurityError")) {
    return (
      "The microphone was refused. Allow it for this page (the camera/microphone icon " +
      "in the address bar, or the site settings) and press the microphone button again."
    );
  }
  if (error && error.name === "NotFoundError") {
    return "No microphone was found. Plug one in (or pair the headset) and try again.";
  }
  return `The microphone could not be opened: ${error && error.message ? error.message : error}`;
}

export class Microphone {
  constructor(onFrame) {
    this.onFrame = onFrame; // (ArrayBuffer pcm, number level) => void
    this.context = null;
    this.stream = null;
    this.node = null;
  }

  get open() {
    return this.context !== null;
  }

  async start() {
    if (this.context) return;
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    const context = new AudioContext({ latencyHint: "interactive" });
    try {
      await context.audioWorklet.addModule("/console/mic-worklet.js");
      const source = context.createMediaStreamSource(stream);
      const node = new AudioWorkletNode(context, "pcm-capture", {
        numberOfInputs: 1,
        numberOfOutputs: 0,
        channelCount: 1,
        channelCountMode: "explicit",
        processorOptions: { targetRate: MIC_RATE, frameMs: FRAME_MS },
      });
      node.port.onmessage = (event) => this.onFrame(event.data.pcm, event.data.level);
      source.connect(node);
      await context.resume();
      Object.assign(this, { context, stream, node });
    } catch (error) {
      stream.getTracks().forEach((t) => t.stop());
      await context.close();
      throw error;
    }
  }

  async stop() {
    const { context, stream, node } = this;
    this.context = this.stream = this.node = null;
    if (node) node.port.onmessage = null;
    if (stream) stream.getTracks().forEach((t) => t.stop());
    if (context) await context.close();
  }
}

/** Plays PCM16 chunks back to back; `flush()` stops everything queued (barge-in). */
export class Player {
  constructor() {
    this.context = null;
    this.gain = null;
    this.nextTime = 0;
    this.sources = new Set();
    this.bytesReceived = 0;
    this.secondsScheduled = 0;
    this.chunks = 0;
  }

  /** Create (or resume) the audio context; call from a user gesture. */
  async unlock() {
    if (!this.context) {
      this.context = new AudioContext({ latencyHint: "interactive" });
      this.gain = this.context.createGain();
      this.gain.connect(this.context.destination);
    }
    if (this.context.state !== "running") await this.context.resume();
  }

  get state() {
    return this.context ? this.context.state : "none";
  }

  get playing() {
    return this.context !== null && this.nextTime > this.context.currentTime;
  }

  /** Queue one chunk; returns the context time at which it starts. */
  play(pcmBuffer, sampleRate) {
    if (!this.context) return null;
    const samples = new Int16Array(pcmBuffer);
    this.bytesReceived += pcmBuffer.byteLength;
    if (samples.length === 0) return null;
    const buffer = this.context.createBuffer(1, samples.length, sampleRate);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < samples.length; i++) channel[i] = samples[i] / 0x8000;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.gain);
    const start = Math.max(this.nextTime, this.context.currentTime + 0.05);
    source.start(start);
    this.nextTime = start + buffer.duration;
    this.secondsScheduled += buffer.duration;
    this.chunks += 1;
    this.sources.add(source);
    source.onended = () => this.sources.delete(source);
    return start;
  }

  flush() {
    for (const source of this.sources) {
      try {
        source.stop();
      } catch {
        /* already stopped */
      }
    }
    this.sources.clear();
    this.nextTime = 0;
  }

  stats() {
    return {
      state: this.state,
      bytes: this.bytesReceived,
      seconds: this.secondsScheduled,
      chunks: this.chunks,
      currentTime: this.context ? this.context.currentTime : 0,
    };
  }
}
