// The public WebSocket session protocol (docs/server.md), nothing more: hello/welcome,
// JSON messages out, JSON messages and `audio` header + binary frame pairs in.

export const PROTOCOL = 2;

/** ws(s)://<the host that served this page>/ */
export function serviceUrl(loc = window.location) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/`;
}

/** The device token: taken once from ?token= (then removed from the address bar and
 * kept for this tab only), else the one this tab already has. */
export function takeToken(loc = window.location, store = window.sessionStorage) {
  const url = new URL(loc.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl) {
    store.setItem("edge.token", fromUrl);
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return store.getItem("edge.token");
}

export class Session extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.ws = null;
    this.welcome = null;
    this.pendingAudio = null; // the `audio` header whose binary frame comes next
    this.protocol = PROTOCOL;
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN && this.welcome !== null;
  }

  /** Feature test: does the service offer this client message? */
  offers(feature) {
    if (!this.welcome) return false;
    const listed = this.welcome.features;
    if (Array.isArray(listed)) return listed.includes(feature);
    if (feature === "end_of_utterance") return this.welcome.protocol >= 2;
    return false;
  }

  /** Open the socket and say hello; resolves with the welcome, rejects with an Error. */
  open(hello) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      ws.binaryType = "arraybuffer";
      this.ws = ws;
      let settled = false;
      const settle = (fn, value) => {
        if (!settled) {
          settled = true;
          fn(value);
        }
      };
      ws.onopen = () => this.send({ type: "hello", protocol: this.protocol, ...hello });
      ws.onerror = () => settle(reject, new Error(`cannot reach the service at ${this.url}`));
      ws.onclose = (event) => {
        if (this.ws !== ws) return; // an earlier attempt's socket
        this.ws = null;
        const wasWelcomed = this.welcome !== null;
        this.welcome = null;
        settle(reject, new Error(event.reason || `the service closed the connection (${event.code})`));
        if (wasWelcomed) this.emit("close", { code: event.code, reason: event.reason });
      };
      ws.onmessage = (event) => {
        if (this.ws !== ws) return;
        const message = this.decode(event.data);
        if (message === null) return;
        if (message.type === "welcome") {
          this.welcome = message;
          settle(resolve, message);
        } else if (message.type === "error" && !this.welcome && message.in_reply_to === "hello") {
          settle(reject, new Error(message.message));
          ws.close(1000, "hello refused");
          return;
        }
        this.emit("message", message);
      };
    });
  }

  /** A JSON message, or an audio header completed by its binary frame; null meanwhile. */
  decode(data) {
    if (data instanceof ArrayBuffer) {
      const header = this.pendingAudio;
      this.pendingAudio = null;
      if (!header) return null;
      return { ...header, pcm: data };
    }
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return { type: "error", message: "the service sent a frame that is not JSON" };
    }
    if (message.type === "audio" && message.bytes > 0) {
      this.pendingAudio = message;
      return null;
    }
    if (message.type === "audio") return { ...message, pcm: new ArrayBuffer(0) };
    return message;
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  send(message) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(message));
      return true;
    }
    return false;
  }

  sendAudio(pcm) {
    if (this.connected && this.ws.bufferedAmount < 1 << 20) this.ws.send(pcm);
  }

  close() {
    if (this.ws) {
      this.send({ type: "bye" });
      const ws = this.ws;
      setTimeout(() => ws.readyState !== WebSocket.CLOSED && ws.close(1000, "bye"), 1000);
    }
  }
}
