"""The API faces on the service's port: :func:`serve_api` plugs them into the WebSocket
server (its ``front``), which keeps serving everything else as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection

from ._app import ApiApp
from ._faces import Faces
from ._limits import ApiLimits
from ._port import HttpPort
from ._turns import Participants


class ApiFront:
    """What the WebSocket server asks of its ``front`` (``edge.server``'s ``PortFront``)."""

    def __init__(self, faces: Faces) -> None:
        self.faces = faces
        self.app = ApiApp(faces)
        self.http = HttpPort(self.app, head_timeout_s=faces.access.hello_timeout_s)
        self.realtime: Callable[[ServerConnection], Awaitable[None]] | None = None

    def connection_class(self) -> type[ServerConnection]:
        return self.http.connection_class()

    def upgrade(self, path: str) -> Callable[[ServerConnection], Awaitable[None]] | None:
        return self.realtime if path == "/v1/realtime" else None

    async def aclose(self) -> None:
        """Requests still running get a moment, then end; API participants leave."""
        await self.http.aclose()
        await self.faces.participants.close()


def serve_api(service: Any, limits: ApiLimits | None = None) -> ApiFront:
    """Serve the APIs on ``service``'s port (an ``EdgeService``, before it starts)."""
    voice = service.voice
    device = service.device
    faces = Faces(
        gateway=service.gateway,
        participants=Participants(service.gateway),
        access=service.websocket.access,
        limits=limits or ApiLimits(max_requests=service.settings.max_sessions),
        stt=voice.stt if voice is not None else None,
        tts=voice.tts if voice is not None else None,
        llm_path=Path(path) if (path := getattr(device, "llm_model_path", None)) else None,
    )
    front = ApiFront(faces)
    service.websocket.front = front
    return front
