"""The API faces on the service's port: :func:`serve_api` plugs them into the WebSocket
server (its ``front``), which keeps serving everything else as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection

from ._app import ApiApp
from ._clock import unsettle
from ._faces import Faces
from ._limits import ApiLimits
from ._port import HttpPort
from ._realtime import RealtimeSession
from ._slots import SLOTS_PER_PREFIX, ConversationSlots
from ._turns import Participants


class ApiFront:
    """What the WebSocket server asks of its ``front`` (``edge.server``'s ``PortFront``)."""

    def __init__(self, faces: Faces) -> None:
        self.faces = faces
        self.app = ApiApp(faces)
        self.http = HttpPort(self.app, head_timeout_s=faces.access.hello_timeout_s)

    def connection_class(self) -> type[ServerConnection]:
        return self.http.connection_class()

    def upgrade(self, path: str) -> Callable[[ServerConnection], Awaitable[None]] | None:
        return self._realtime if path == "/v1/realtime" else None

    async def _realtime(self, ws: ServerConnection) -> None:
        await RealtimeSession(ws, self.faces).run()

    async def aclose(self) -> None:
        """Requests still running get a moment, then end; API participants leave; no
        settle of a stateless request's state is left to run against a closing model."""
        await self.http.aclose()
        await self.faces.participants.close()
        unsettle(self.faces.gateway.llm)


def _limits(settings: Any) -> ApiLimits:
    """The WebSocket's bounds, for requests: at once, per address, time to send."""
    return ApiLimits(
        max_requests=settings.max_sessions,
        max_per_address=settings.max_sessions_per_address,
        body_timeout_s=settings.hello_timeout_s,
    )


def conversations_per_prefix(device: Any) -> int:
    """Conversations under one system prompt that keep a model state each: as many as
    the device's KV budget keeps warm (``warm_participants``), and never under
    :data:`SLOTS_PER_PREFIX`."""
    warm = getattr(getattr(device, "budgets", None), "warm_participants", 0)
    return max(SLOTS_PER_PREFIX, warm if isinstance(warm, int) else 0)


def serve_api(service: Any, limits: ApiLimits | None = None) -> ApiFront:
    """Serve the APIs on ``service``'s port (an ``EdgeService``, before it starts)."""
    voice = service.voice
    device = service.device
    faces = Faces(
        gateway=service.gateway,
        participants=Participants(service.gateway),
        access=service.websocket.access,
        limits=limits or _limits(service.settings),
        stt=voice.stt if voice is not None else None,
        tts=voice.tts if voice is not None else None,
        llm_path=Path(path) if (path := getattr(device, "llm_model_path", None)) else None,
        shift_trimmed=service.settings.shift_trimmed_history,
        slots=ConversationSlots(conversations_per_prefix(device)),
    )
    front = ApiFront(faces)
    service.websocket.front = front
    return front
