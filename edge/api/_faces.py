"""What every API face reads: the gateway (and through it the hub, the router and the one
model scheduler), the API participants, the speech models, the limits."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.llm import TokenCounter
from edge.server import AccessPolicy, Gateway

from ._limits import ApiLimits
from ._response_chain import ResponseChain
from ._slots import ConversationSlots
from ._turns import Participants


@dataclass
class Faces:
    gateway: Gateway
    participants: Participants
    access: AccessPolicy = field(default_factory=AccessPolicy)
    limits: ApiLimits = field(default_factory=ApiLimits)
    stt: Any = None  # the voice pipeline's recogniser (None without voice)
    tts: Any = None  # and its voice
    llm_path: Path | None = None
    shift_trimmed: bool = True  # stateless requests: GenerationOptions.shift_reuse
    slots: ConversationSlots = field(default_factory=ConversationSlots)  # their cache keys
    responses: ResponseChain = field(default_factory=ResponseChain)  # previous_response_id
    started: float = field(default_factory=time.time)
    _digest: str | None = None

    def llm_id(self) -> str:
        return self.gateway.models.get("llm", "edge")

    def model_ids(self) -> list[str]:
        models = self.gateway.models
        return [models[role] for role in ("llm", "stt", "tts") if role in models] or ["edge"]

    def llm_size(self) -> int:
        try:
            return self.llm_path.stat().st_size if self.llm_path is not None else 0
        except OSError:
            return 0

    def llm_digest(self) -> str:
        """A stable id for the model (a hash of its name and size; the file is not read)."""
        if self._digest is None:
            seed = f"{self.llm_id()}:{self.llm_size()}".encode()
            self._digest = hashlib.sha256(seed).hexdigest()
        return self._digest

    def context_length(self) -> int | None:
        llm = self.gateway.llm
        return llm.context_length if isinstance(llm, TokenCounter) else None
