// AudioWorklet: the microphone (mono, the context's rate) resampled to the hello's rate
// and posted to the page as little-endian PCM16 frames of `frameMs` milliseconds, each
// with its RMS level. Downsampling averages the input samples each output sample covers
// (a box low-pass) and interpolates linearly between those averages' positions.

class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate = 16000, frameMs = 100 } = options.processorOptions || {};
    this.step = sampleRate / targetRate; // input samples per output sample
    this.frame = new Int16Array(Math.round((targetRate * frameMs) / 1000));
    this.filled = 0;
    this.pos = 0; // position of the next output sample, in input samples (may be < 0)
    this.prev = 0; // last input sample of the previous block
    this.sum = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const mono = input[0];
    const n = mono.length;
    const half = Math.max(0, Math.floor(this.step / 2));
    while (this.pos < n) {
      let value;
      if (half > 0) {
        const start = Math.max(0, Math.floor(this.pos) - half);
        const end = Math.min(n, Math.floor(this.pos) + half + 1);
        let acc = 0;
        for (let i = start; i < end; i++) acc += mono[i];
        value = end > start ? acc / (end - start) : this.prev;
      } else {
        const i = Math.floor(this.pos);
        const frac = this.pos - i;
        const a = i < 0 ? this.prev : mono[i];
        const b = i + 1 < n ? mono[i + 1] : a;
        value = a + (b - a) * frac;
      }
      this.push(value);
      this.pos += this.step;
    }
    this.pos -= n;
    this.prev = mono[n - 1];
    return true;
  }

  push(value) {
    const clipped = Math.max(-1, Math.min(1, value));
    this.frame[this.filled++] = clipped < 0 ? clipped * 0x8000 : clipped * 0x7fff;
    this.sum += clipped * clipped;
    if (this.filled === this.frame.length) {
      const level = Math.sqrt(this.sum / this.filled);
      const pcm = this.frame.slice().buffer; // Int16Array is little endian on every browser host
      this.port.postMessage({ pcm, level }, [pcm]);
      this.filled = 0;
      this.sum = 0;
    }
  }
}

registerProcessor("pcm-capture", PcmCapture);
