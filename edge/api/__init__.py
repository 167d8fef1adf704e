"""The APIs people already use, on the service's own port: OpenAI's REST API (chat
completions, responses, models, transcriptions, speech), OpenAI's Realtime API over
WebSocket, and Ollama's chat and generate API. They reach the product only through the
gateway and the output hub the WebSocket protocol uses (docs/api.md).

Example::

    service = EdgeService(settings)
    serve_api(service)          # before the service starts listening
    async with service:
        ...                     # https://host:port/v1 and /api/ answer
"""

from ._app import ApiApp
from ._errors import ApiError
from ._faces import Faces
from ._front import ApiFront, serve_api
from ._limits import ApiLimits
from ._turns import Participants

__all__ = ["ApiApp", "ApiError", "ApiFront", "ApiLimits", "Faces", "Participants", "serve_api"]
