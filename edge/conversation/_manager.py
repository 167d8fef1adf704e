"""The public :class:`ContextManager`: the face over its parts, each with one job and given
only what it uses: the state's one owner (``_state.py``: the participants' cached views
over the store, what each waits for), the reads (``_reader.py``), the writes
(``_writing.py``), compaction (``_compacting.py``), when background work runs
(``_schedule.py``) and the participants' model prefixes (``_prefixes.py``); configured by
one :class:`~edge.conversation.ContextConfig`. The parts know the state's owner, none of
them another; the face publishes their methods as its own.

Edge options: compaction starts only after the device (the model's activity tracker and
this manager's answers) has been quiet for ``compaction_quiet_s`` seconds, runs at
background priority and drains the whole backlog oldest first. A failed summary request
(empty, cut off, an error) keeps the entries until the section's next entry; the
``compaction_failure_limit``-th in a row for a section gives the extractive summary of the
participant's own statements instead. With ``rewarm`` (and a model that can ``warm``) the
prompt prefix of each participant who completed an exchange is re-warmed first, once the
device has been quiet for ``rewarm_quiet_s`` (at most ``compaction_quiet_s``), so their
next answer evaluates only its request, and a compaction warms the prefix its summary will
give the participant under a key of its own before it commits (the model's ``move_cache``
then hands it over): a turn during or right after their own compaction finds a warm prefix
either way. Under steady use (answers less than ``compaction_quiet_s`` apart, so no quiet
period comes) a section that overflows its budget is compacted at once without the model
(the participant's statements verbatim, as when a model summary fails), so the prompt's
start changes once per budget instead of on every turn.

Recall: every participant statement (what they said, each incremental topic update) is
indexed in ``recall_index`` (the store's FTS5 index when the store keeps the whole
conversation, else in memory); each answer request gets a "recalled" block of up to
``recall_budget_bytes`` with the earlier statements most relevant to it that are no longer
in the model's view (0 turns recall off). A re-warm includes a block chosen ahead of the
request (recent facts and corrections), so a request recalling one of those evaluates no
recalled token anew.

Storage: ``store`` (an :class:`edge.store.SessionStore`) keeps every participant's whole
conversation and the model's view of it, durable when a write returns; the manager keeps
only a cache of the view in memory (:meth:`ContextManager.suspend` drops it, the next use
reloads it). Without ``store`` the manager uses an in-memory one of its own that keeps
compacted entries only with ``keep_transcript=True``.

Compaction runs in the background while the manager is open: ``async with
ContextManager(llm) as ctx:``, or, without ``async with``, from the first write inside a
running event loop until :meth:`ContextManager.close`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Unpack

import anyio

from edge.llm import ChatMessage, LLMService
from edge.recall import MemoryRecallIndex, RecallIndex, StoreRecallIndex
from edge.runtime import Agent, Topic, now_us
from edge.store import SessionStore

from . import _persist
from ._background import Jobs, Quiet, Wakeup
from ._compacting import Compaction
from ._compaction import Compactor
from ._config import ContextConfig, ContextOptions, check_participant, configured
from ._dialogue import ContextDialogue
from ._prefixes import SYSTEM_PROMPT_KEY, Prefixes, PrefixWarmer
from ._reader import Reader
from ._recall import Recall
from ._render import Renderer
from ._schedule import Scheduler
from ._state import ContextState
from ._writing import Writer


class _Parts(NamedTuple):
    """The manager's parts, each given only what it uses; nothing is wired afterwards."""

    state: ContextState
    reader: Reader
    writer: Writer
    compaction: Compaction
    schedule: Scheduler
    prefixes: Prefixes
    jobs: Jobs
    quiet: Quiet
    recall: Recall


def _assemble(
    llm: LLMService,
    c: ContextConfig,
    store: SessionStore,
    owns_store: bool,
    recall_index: RecallIndex | None,
    clock: Callable[[], int],
) -> _Parts:
    if recall_index is None:  # a store that keeps the whole conversation indexes it
        recall_index = StoreRecallIndex(store) if store.keep_history else MemoryRecallIndex()
    renderer = Renderer(c.timezone)
    recall = Recall(recall_index, c.recall_budget_bytes, renderer)
    wakeup, jobs, quiet = Wakeup(), Jobs(), Quiet(llm, c.compaction_quiet_s)
    state = ContextState(c, store, recall, owns_store, wakeup.set)
    reader = Reader(state, recall, clock)
    prefixes = Prefixes(llm, state, reader.prefix, jobs, rewarm=c.rewarm)
    compactor = Compactor(llm, c.compaction_prompts, c.compaction_failure_limit)
    budget = c.compaction_input_budget_bytes
    compaction = Compaction(state, compactor, prefixes, jobs, quiet, renderer, budget, wakeup.set)
    rewarm = prefixes.rewarm if prefixes.can_rewarm else None
    schedule = Scheduler(state, quiet, wakeup, compaction.run, rewarm, c)
    writer = Writer(state, c, clock, schedule.start, compaction.relieve, wakeup.set)
    return _Parts(state, reader, writer, compaction, schedule, prefixes, jobs, quiet, recall)


class ContextManager:
    """Participant-scoped dialogue and named background sources, compacted when idle.

    ``config`` (a :class:`ContextConfig`) names the topics: ``summary_context_topics``
    whose update replaces that source's state, ``incremental_context_topics`` whose
    updates append and are compacted (the spec's keywords, ``options``, set them over
    ``config``). Budgets are UTF-8 bytes of rendered text: ``dialogue_budget_bytes`` for
    completed dialogue, ``topic_budget_bytes`` per topic (one value, or a mapping naming
    every configured topic) and ``compaction_input_budget_bytes`` for the previous summary
    plus the entries of one compaction request. ``timezone`` is the zone times are shown
    in (local by default); ``clock`` returns Unix microseconds. ``store`` and
    ``recall_index``: see the module, which also says when compaction, re-warming and
    recall happen.

    Its reads (``blocks``, ``render``, ``messages``, ``recalled``, ``stated``, ...) are
    the reader's (``_reader.py``), its writes (``record_exchange``, ``update``) the
    writer's, ``compact`` and ``add_hook`` compaction's; ``answering`` and ``touch`` mark
    activity, which background work waits to end."""

    def __init__(
        self,
        llm: LLMService,
        config: ContextConfig | None = None,
        *,
        store: SessionStore | None = None,
        recall_index: RecallIndex | None = None,
        clock: Callable[[], int] = now_us,
        **options: Unpack[ContextOptions],
    ) -> None:
        self.config = c = configured(config, options)
        self.budgets, self.topics = c.budgets, c.topics
        self.compaction_input_budget_bytes = c.compaction_input_budget_bytes
        self.store = store if store is not None else SessionStore(keep_history=c.keep_transcript)
        self._parts = _assemble(llm, c, self.store, store is None, recall_index, clock)
        self._state, r, w, k, self._schedule, self._prefixes, self._jobs, q, _ = self._parts
        # the parts' methods are the face's (each documented where it is defined)
        self.blocks, self.render, self.render_blocks = r.blocks, r.render, r.render_blocks
        self.messages, self.recalled, self.stated = r.messages, r.recalled, r.stated
        self.transcript, self.summary = r.transcript, r.summary
        self.last_compaction, self.pending = r.last_compaction, self._state.pending
        self.writer, self.update, self.record_exchange = w, w.update, w.record_exchange
        self.compact, self.add_hook = k.compact, k.add_hook
        self.answering, self.touch = q.answering, q.touch
        self.reconcile = ContextDialogue(self).reconcile  # the spec's, by id or words

    @property
    def closed(self) -> bool:
        return self._state.closed

    def participants(self) -> list[str]:
        return self._state.ids()

    async def warm_words(self, participant_id: str, messages: list[ChatMessage]) -> None:
        """Evaluate an answer request up to a speaker's words so far (``Prefixes``)."""
        await self._prefixes.warm_words(participant_id, messages)

    def prefix_warmer(
        self, system_prompt: Callable[[], str], shared_key: str | None = SYSTEM_PROMPT_KEY
    ) -> PrefixWarmer:
        """A runtime agent warming each joining participant's prompt prefix (the system
        prompt, from the state :meth:`PrefixWarmer.warm_shared` evaluates under
        ``shared_key``), so their first answer starts fast; ``async with`` it."""
        return PrefixWarmer(self._prefixes, system_prompt, shared_key)

    def subscriber(self, activity_topics: Sequence[Topic[Any]] = ()) -> Agent:
        """An :class:`edge.runtime.Agent` applying the configured topics' updates; register
        it with the runtime that delivers them, before the runtime starts. A message on
        any of ``activity_topics`` (e.g. the voice pipeline's transcripts: a partial every
        0.8 s of speech) counts as participant activity (``touch``), so background work
        does not start while someone is talking."""
        from ._topics import ContextSubscriber

        c = self.config
        return ContextSubscriber(
            self, c.summary_context_topics, c.incremental_context_topics, activity_topics
        )

    def busy(self) -> bool:
        """Whether background work waits (``pending``) or runs (compaction, a re-warm)."""
        return bool(self.pending()) or self._jobs.any()

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ContextManager:
        await self._schedule.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._schedule.close(self.close)

    async def suspend(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and drop their context from
        memory; it stays stored and comes back on the next use (a reconnect). Idempotent;
        other participants are unaffected."""
        await self._jobs.cancel(participant_id)
        self._state.drop(participant_id)

    async def clear(self, participant_id: str) -> None:
        """Cancel the participant's compaction, wait for it, and forget their context
        everywhere, the store, the recall index and the model's saved prompt state
        included. Idempotent; other participants are unaffected. Works from any task and
        cancel scope: a cancelled caller still forgets everything before it returns."""
        with anyio.CancelScope(shield=True):
            await self.suspend(participant_id)
            await self._prefixes.forget(participant_id)
            await self._state.forget(participant_id)

    async def resume(self, participant_id: str) -> bool:
        """Load a returning participant's context now and re-warm their prompt prefix in
        the background (after a restart the model's cache is cold). False when nothing is
        stored for them."""
        check_participant(participant_id)
        if self.closed or not self.store.exists(participant_id):
            return False
        self._schedule.rewarm_soon(self._state.participant(participant_id))
        return True

    async def close(self) -> None:
        """Stop compaction and drop every participant from memory and later writes; what
        is stored stays stored (the manager's own in-memory store is closed). Works from
        any task and cancel scope, inside or outside ``async with``; idempotent. It only
        cancels work and waits for it to end, so it completes in a cancelled scope too."""
        self._state.close()
        with anyio.CancelScope(shield=True):
            await self._schedule.stop()
            await self._jobs.cancel_all()
        self._state.release()

    # ----------------------------------------------------------------- save and restore

    def save(self, path: str | Path, participant_ids: Sequence[str] | None = None) -> None:
        """Write participants' exports (both views, summaries, topic states, identities,
        compaction reports; every stored participant by default) to one JSON file.
        Configuration and hooks are not saved."""
        if participant_ids is None:
            participant_ids = [p.participant_id for p in self.store.participants()]
        _persist.save(Path(path), self.store, list(participant_ids))

    async def load(self, path: str | Path) -> list[str]:
        """Import a file written by :meth:`save`, replacing those participants' context;
        this manager's own topics and budgets apply (sections it does not configure stay
        in the history, out of the model's view). Returns the participants loaded."""
        if self.closed:
            raise RuntimeError("the context manager is closed")
        loaded = _persist.load(Path(path), self.store)
        for pid in loaded:
            await self.suspend(pid)  # the next use reads the imported context
            self._state.cached(pid)
        return loaded
