"""The stored responses ``previous_response_id`` continues (OpenAI's Responses API).

Each stored response keeps only what it added: its input messages and its answer, and the
id of the response it continued. A request naming ``previous_response_id`` gets the whole
conversation by walking that chain back. The store is bounded in bytes (the least recently
used responses are forgotten first), so a client can continue a conversation for as long
as its newest responses are kept, and no client can grow the service's memory.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import NoReturn

from edge.llm import ChatMessage

from ._errors import ApiError

MAX_STORED_BYTES = 8 * 1024 * 1024
MAX_CHAIN = 1_000  # responses in one conversation (a cycle can never form; this bounds a walk)


@dataclass(frozen=True)
class StoredResponse:
    previous: str | None
    messages: tuple[ChatMessage, ...]  # this response's input, then its answer
    body: str = "{}"  # the response object, as GET /v1/responses/{id} answers it (JSON)

    @property
    def size(self) -> int:
        return sum(len(m.content.encode()) for m in self.messages) + len(self.body) + 64


class ResponseChain:
    """Responses by id, bounded to ``max_bytes`` in all (see the module docstring)."""

    def __init__(self, max_bytes: int = MAX_STORED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._stored: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._stored)

    def history(self, response_id: str) -> list[ChatMessage]:
        """The conversation up to and including ``response_id``'s answer, oldest first;
        a 400 naming ``previous_response_id`` when it, or a response before it, is not
        kept."""
        chain: list[str] = []
        at: str | None = response_id
        while at is not None:
            stored = self._stored.get(at)
            if stored is None:
                which = "" if at == response_id else f" (its earlier response {at!r} is not)"
                _refuse(f"previous response {response_id!r} is not kept here{which}")
            if len(chain) >= MAX_CHAIN:
                _refuse(f"the conversation before {response_id!r} is over {MAX_CHAIN} responses")
            chain.append(at)
            at = stored.previous
        for used in reversed(chain):  # used now, the newest last: forgotten after the rest
            self._stored.move_to_end(used)
        return [message for used in reversed(chain) for message in self._stored[used].messages]

    def get(self, response_id: str) -> StoredResponse | None:
        return self._stored.get(response_id)

    def forget(self, response_id: str) -> bool:
        """Forget one response (a conversation continued from it can no longer be)."""
        stored = self._stored.pop(response_id, None)
        if stored is not None:
            self._bytes -= stored.size
        return stored is not None

    def keep(self, response_id: str, stored: StoredResponse) -> None:
        if stored.size > self.max_bytes:
            return
        self._stored[response_id] = stored
        self._bytes += stored.size
        while self._bytes > self.max_bytes:
            _, oldest = self._stored.popitem(last=False)
            self._bytes -= oldest.size


def _refuse(why: str) -> NoReturn:
    raise ApiError(
        400, f"{why}: send the conversation's messages as input", param="previous_response_id"
    )
