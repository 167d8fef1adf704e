"""The synchronous llama.cpp model: loading, chat template, KV bookkeeping, one step at a time.

Nothing here is thread-safe or async. :class:`~edge.llm.LlamaCppLLM` calls these methods
from a worker thread while it holds the scheduler's slot, one small step at a time, so it
can check for preemption and cancellation between steps.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._kvstore import KVStore
from ._threads import ThreadPolicy
from ._types import ChatMessage, ModelLoadError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> None:
    """Raise :class:`ModelLoadError` unless ``path`` is a readable GGUF file."""
    if not path.exists():
        raise ModelLoadError(f"model file {path} does not exist")
    if path.is_dir():
        raise ModelLoadError(f"model path {path} is a directory, not a GGUF file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelLoadError(f"model file {path} cannot be read: {exc}") from exc
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"model file {path} is not a GGUF file (starts with {magic!r}, expected b'GGUF'); "
            "convert it with llama.cpp's convert scripts or pick a .gguf from the catalogue"
        )


_USER_TEXT_MARK = "\u2063edge-user-text\u2063"
"""Stands in for a user message's text, to find where a chat template puts it."""

_LLAMA_LOG = logging.getLogger("edge.llm.llama_cpp")
_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
"""ggml.h's ``ggml_log_level`` (DEBUG 1, INFO 2, WARN 3, ERROR 4; CONT 5 continues a line)."""
_log_callback: Any = None
_ABORTED_LINES = (
    "removing memory module entries",
    "graph_compute_async failed with error 1",
    "compute status: 1",
    "failed to decode, ret = 2",
)


def route_llama_logs() -> None:
    """Send llama.cpp's own log lines to Python logging (``edge.llm.llama_cpp``).

    The lines llama.cpp prints when a background batch is aborted on purpose (the abort
    callback; ggml status 1, ``llama_decode`` 2) are logged at debug level, not as errors.
    """
    global _log_callback
    if _log_callback is not None:
        return
    import ctypes

    from llama_cpp import llama_cpp as capi

    last = [logging.DEBUG]

    def on_log(level: int, text: bytes, _data: Any) -> None:
        line = text.decode("utf-8", "replace").rstrip()
        lvl = last[0] if level == 5 else _LEVELS.get(level, logging.DEBUG)
        last[0] = lvl
        if any(marker in line for marker in _ABORTED_LINES):
            lvl = logging.DEBUG
        if line and _LLAMA_LOG.isEnabledFor(lvl):
            _LLAMA_LOG.log(lvl, "%s", line)

    _log_callback = capi.llama_log_callback(on_log)
    capi.llama_log_set(_log_callback, ctypes.c_void_p(0))


@dataclass(frozen=True)
class SavedState:
    """A context's KV state (llama.cpp's state of sequence 0: its KV cells, no logits)
    and the tokens it holds. ``data`` is the buffer llama.cpp wrote (a ctypes array),
    handed back to it as is on restore: no copy on either side."""

    data: Any
    tokens: tuple[int, ...]

    @property
    def llama_state_size(self) -> int:
        return len(self.data)


class EvalAborted(Exception):
    """A background evaluation stopped mid-batch because interactive work arrived."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


SHIFT_MIN_RUN = 64
"""Tokens a held run must share with a prompt to be reused by shifting (a cut span's
worth removing: below this, evaluating the run again costs little)."""


def shifted_run(
    held: Sequence[int], target: Sequence[int], start: int, min_run: int = SHIFT_MIN_RUN
) -> tuple[int, int] | None:
    """Where ``target`` goes on as ``held`` does after one cut span: ``(offset, length)``
    of the first run in ``held`` past ``start`` (the tokens both begin with) that ``target``
    continues with from ``start``, at least ``min_run`` tokens long; None when there is
    none. ``held[start:offset]`` is the cut span (a client's oldest messages dropped)."""
    probe = list(target[start : start + min_run])
    if len(probe) < min_run:
        return None
    first, last = probe[0], len(held) - min_run
    for offset in range(start + 1, last + 1):
        if held[offset] == first and list(held[offset : offset + min_run]) == probe:
            length = min_run + common_prefix(held[offset + min_run :], target[start + min_run :])
            return offset, length
    return None


class AbortHook:
    """llama.cpp's abort callback on one context, set only while an evaluation may be
    aborted: while :attr:`check` is set (:meth:`watch`), llama.cpp asks it between graph
    nodes and drops the evaluation when it answers True. It is called hundreds of times a
    token and each call takes the GIL, so an evaluation with it set slows down whenever
    another thread runs Python, the event loop included (``benchmarks/gil_contention.py``);
    interactive evaluations run without it."""

    def __init__(self, ctx: Any) -> None:
        from llama_cpp import llama_cpp as capi

        lib = capi._lib
        lib.llama_set_abort_callback.argtypes = [
            capi.llama_context_p_ctypes,
            capi.ggml_abort_callback,
            ctypes.c_void_p,
        ]
        lib.llama_set_abort_callback.restype = None
        self._set = lib.llama_set_abort_callback
        self._ctx = ctx
        self.check: Callable[[], bool] | None = None
        self._callback = capi.ggml_abort_callback(lambda _data: bool(self.check and self.check()))
        self._none = capi.ggml_abort_callback(0)
        self._set(ctx, self._none, None)

    @classmethod
    def install(cls, ctx: Any) -> AbortHook | None:
        """The hook on ``ctx`` (watching nothing), or None when this build has no such
        hook."""
        from llama_cpp import llama_cpp as capi

        if not hasattr(capi._lib, "llama_set_abort_callback"):
            log.info(
                "this llama.cpp build has no abort callback; background work yields "
                "between batches only"
            )
            return None
        return cls(ctx)

    @property
    def armed(self) -> bool:
        """Whether llama.cpp calls back into Python between graph nodes."""
        return self.check is not None

    def watch(self, check: Callable[[], bool] | None) -> None:
        """Have llama.cpp ask ``check`` between graph nodes of the next evaluations, or
        (None) run them to the end without the callback."""
        if (check is None) != (self.check is None):
            self._set(self._ctx, self._none if check is None else self._callback, None)
        self.check = check


def _marked(
    messages: Sequence[ChatMessage], user_next: bool, open_last: bool
) -> list[ChatMessage] | None:
    """``messages`` with a mark where a warmed prefix ends: after the last message's text
    (``open_last``: a partial transcript, its words still coming), or as the text of a user
    message after them (``user_next``: the request evaluates only its words and the
    generation prompt; the generation prompt still, when the template hides where the
    text would go). None: the whole prompt with its generation prompt."""
    if open_last and messages:
        *before, last = messages
        return [*before, ChatMessage(role=last.role, content=last.content + _USER_TEXT_MARK)]
    if user_next:
        return [*messages, ChatMessage(role="user", content=_USER_TEXT_MARK)]
    return None


class LlamaEngine:
    """One llama.cpp context plus saved states of other cache keys."""

    n_batch = 512

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int | None,
        n_threads: int | None,
        n_gpu_layers: int,
        seed: int,
        kv_cache_budget_bytes: int,
        own_context: bool = True,
        adaptive_threads: bool = True,
    ) -> None:
        self.path = path
        self.own_context = own_context
        self._want_ctx = n_ctx
        self.n_threads = n_threads or len(os.sched_getaffinity(0))
        self.thread_policy = ThreadPolicy(self.n_threads, adaptive=adaptive_threads)
        self.n_gpu_layers = n_gpu_layers
        self.seed = seed
        self.store = KVStore(kv_cache_budget_bytes)
        self.owner: str | None = None  # cache key whose tokens are in the live context
        self._dirty = False
        self._logits_fresh = False
        self.llama: Any = None
        self.gpu_layers_loaded: tuple[int, int] | None = None
        self._abort_hook: AbortHook | None = None

    # -- loading -------------------------------------------------------------------------
    def load(self) -> None:
        check_gguf(self.path)
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        try:
            self.llama = Llama(
                model_path=str(self.path),
                n_ctx=(self._want_ctx or 0) if self.own_context else 64,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                n_gpu_layers=self.n_gpu_layers,
                n_batch=self.n_batch,
                seed=self.seed,
                logits_all=False,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {exc} "
                "(the file may be truncated or corrupt, or its architecture unsupported "
                "by this llama-cpp-python build)"
            ) from exc
        if self.own_context and self._want_ctx is None and self.llama.n_ctx() > 8192:
            # The model's training context can be huge; size the KV cache sensibly by default.
            self.llama.close()
            self._want_ctx = 8192
            self.load()
            return
        route_llama_logs()
        self.gpu_layers_loaded = self._offloaded_layers()
        self._install_abort_callback()
        model = self.llama._model
        template = self.llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelLoadError(f"{self.path} has no chat template in its GGUF metadata")
        eos = model.token_get_text(self.llama.token_eos())
        bos_id = self.llama.token_bos()
        bos = model.token_get_text(bos_id) if bos_id >= 0 else ""
        self._formatter = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)
        self._eos_text = eos
        self.n_vocab = self.llama.n_vocab()
        self.model_name = self.llama.metadata.get("general.name", self.path.stem)
        self.n_ctx_train = int(
            self.llama.metadata.get(
                f"{self.llama.metadata.get('general.architecture', 'llama')}.context_length", 0
            )
            or 0
        )
        # Without its own context (batching), the engine only tokenizes; the batch
        # context gets this many tokens per sequence.
        default = min(self.n_ctx_train or 8192, 8192)
        self.n_ctx = self.llama.n_ctx() if self.own_context else self._want_ctx or default

    def _offloaded_layers(self) -> tuple[int, int]:
        """(layers on the GPU, of all): llama.cpp offloads the repeating layers and then
        the output layer, only when its build supports offload."""
        import llama_cpp

        total = int(llama_cpp.llama_model_n_layer(self.llama._model.model)) + 1
        if not self.n_gpu_layers or not llama_cpp.llama_supports_gpu_offload():
            return 0, total
        return (total if self.n_gpu_layers < 0 else min(self.n_gpu_layers, total)), total

    def _install_abort_callback(self) -> None:
        """Let background evaluations stop between graph nodes (see :meth:`eval`)."""
        self._abort_hook = AbortHook.install(self.llama._ctx.ctx)

    @property
    def can_abort(self) -> bool:
        return self._abort_hook is not None

    def close(self) -> None:
        self.thread_policy.stop()
        if self.llama is not None:
            self.llama.close()
            self.llama = None
        self.store.clear()

    # -- text <-> tokens -----------------------------------------------------------------
    def format_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool) -> str:
        self._formatter.add_generation_prompt = add_generation_prompt
        dumped: list[Any] = [m.model_dump() for m in messages]  # llama_cpp's message TypedDicts
        result = self._formatter(messages=dumped, enable_thinking=False)
        return result.prompt

    def format_warm(
        self, messages: Sequence[ChatMessage], user_next: bool, open_last: bool = False
    ) -> str:
        """The prompt prefix a warm of ``messages`` evaluates (:func:`_marked`): with the
        generation prompt, up to where a next user message's text begins (``user_next``),
        or up to the end of the last message's words still coming (``open_last``)."""
        marked = _marked(messages, user_next, open_last)
        if marked is not None:
            text = self.format_chat(marked, False)
            cut = text.rfind(_USER_TEXT_MARK)
            if cut >= 0:
                return text[:cut]
        return self.format_chat(messages, True)

    def tokenize_prompt(self, text: str) -> list[int]:
        """Tokens of a rendered prompt (special tokens parsed, no extra BOS)."""
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def tokenize_plain(self, text: str) -> list[int]:
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def token_bytes(self, token: int) -> bytes:
        return self.llama.detokenize([token])

    def is_eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.llama._model.vocab, token))

    # -- KV state ------------------------------------------------------------------------
    def switch_to(self, key: str, seed: str | None = None) -> None:
        """Make ``key`` the live context's owner, saving the previous owner's state.

        A key with no saved state starts from ``seed``'s (a copy: a shared prefix such as
        the decision options, extended per participant), when there is one."""
        if self.owner == key:
            return
        previous = self.owner
        if previous is not None and self._dirty and self.llama.n_tokens > 0:
            self.store.put(previous, self.save_state())
        self._dirty = False
        state = self.store.get(key)
        if state is None and seed is not None and seed != previous:
            state = self.store.get(seed)  # (the live context already is the seed's otherwise)
        if state is not None:
            self.load_state(state)
        self.owner = key

    def save_state(self) -> SavedState:
        """The live sequence's KV state. Sequence-level state, not the whole context's:
        for 500 tokens (11.5 MB) saving took 3 ms instead of 6.5 ms and restoring 3.5 ms
        instead of 11.7 ms (the whole-context restore resets every cell of the window)."""
        from llama_cpp import llama_cpp as capi

        ctx = self.llama._ctx.ctx
        size = capi.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = capi.llama_state_seq_get_data(ctx, buf, size, 0)
        if written != size:
            raise RuntimeError("llama.cpp could not save the context's state")
        tokens = tuple(int(t) for t in self.llama.input_ids[: self.llama.n_tokens])
        return SavedState(buf, tokens)

    def load_state(self, state: SavedState) -> None:
        from llama_cpp import llama_cpp as capi

        size = len(state.data)
        if capi.llama_state_seq_set_data(self.llama._ctx.ctx, state.data, size, 0) != size:
            raise RuntimeError("llama.cpp could not restore a saved state")
        n = len(state.tokens)
        self.llama.input_ids[:n] = state.tokens
        self.llama.n_tokens = n
        self.llama._requires_eval = True
        self._logits_fresh = False

    def forget(self, key: str) -> None:
        """Drop a key's saved state (and its claim on the live context)."""
        self.store.drop(key)
        if self.owner == key:
            self.owner = None
            self._dirty = False

    def move(self, source: str, target: str) -> bool:
        """Give ``source``'s state (saved, or the live context it owns) to ``target``,
        replacing target's; False (nothing changed) when ``source`` has none."""
        if self.owner == source:
            self.store.drop(target)
            self.owner = target
            return True
        state = self.store.pop(source)
        if state is None:
            return False
        self.forget(target)
        self.store.put(target, state)
        return True

    def plan(self, target: Sequence[int], need_logits: bool = True) -> tuple[int, list[int]]:
        """How many of ``target``'s tokens the live context already holds, and the rest.

        When logits are needed and the whole target is cached but its logits are stale,
        the last token is evaluated again.
        """
        n = self.llama.n_tokens
        reuse = common_prefix(self.llama.input_ids[:n], target)
        if need_logits and reuse == len(target) and not (self._logits_fresh and n == reuse):
            reuse = max(0, reuse - 1)
        return reuse, list(target[reuse:])

    def holds(self, key: str, tokens: Sequence[int]) -> bool:
        """Whether the live context is ``key``'s and holds exactly ``tokens`` (checked by
        length and last token: only its owner's steps change it)."""
        n = self.llama.n_tokens
        return (
            self.owner == key
            and n == len(tokens)
            and (n == 0 or int(self.llama.input_ids[n - 1]) == tokens[-1])
        )

    def truncate(self, n: int) -> None:
        if n < self.llama.n_tokens:
            self.llama._ctx.kv_cache_seq_rm(-1, n, -1)
            self.llama.n_tokens = n
            self._logits_fresh = False
            self._dirty = True

    def eval(self, tokens: Sequence[int], abort_check: Callable[[], bool] | None = None) -> None:
        """Evaluate ``tokens`` after the live context.

        With ``abort_check``, llama.cpp asks it between graph nodes and stops when it
        returns True: the batch in progress is dropped (llama.cpp removes its positions),
        batches already done stay, and :class:`EvalAborted` is raised. The caller plans
        again from the tokens actually held.
        """
        if not tokens:
            return
        self._dirty = True
        self._logits_fresh = False
        if self._abort_hook is not None:
            self._abort_hook.watch(abort_check)
        self.thread_policy.apply(self.llama._ctx.ctx)  # fewer while others hold cores
        try:
            self.llama.eval(tokens)
        except RuntimeError as exc:
            if abort_check is not None and "returned 2" in str(exc):
                raise EvalAborted from None
            raise
        finally:
            if self._abort_hook is not None:
                self._abort_hook.watch(None)
        self._logits_fresh = True

    def reset(self) -> None:
        """Forget the live context (after a failure)."""
        if self.llama is not None:
            self.llama.reset()
        self.owner = None
        self._dirty = False
        self._logits_fresh = False

    # -- sampling ------------------------------------------------------------------------
    def new_sampler(self, temperature: float, repeat_penalty: float = 1.1) -> Any:
        return self.llama._init_sampler(
            top_k=40, top_p=0.95, min_p=0.05, temp=temperature, repeat_penalty=repeat_penalty
        )

    def sample(self, sampler: Any) -> int:
        return int(sampler.sample(self.llama._ctx, -1))

    def advance(self, token: int, sampler: Any) -> int:
        """Evaluate one generated token and sample the next (one step of generation)."""
        self.eval([token])
        return self.sample(sampler)

    def logprobs(self) -> Any:
        """Log-softmax (a numpy array) of the next-token distribution after the last
        evaluated token."""
        raw = self.llama._ctx.get_logits_ith(-1)
        logits = np.ctypeslib.as_array(raw, shape=(self.n_vocab,)).astype(np.float64)
        peak = logits.max()
        return logits - (peak + np.log(np.exp(logits - peak).sum()))
