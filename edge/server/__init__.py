"""The network service: ``EdgeService`` composes the whole product in one runtime and
serves it over a WebSocket session protocol, Wyoming (Home Assistant) and mDNS.

Example::

    async with EdgeService(ServiceSettings(host="127.0.0.1", port=8765)) as service:
        print(service.websocket_url)
        await anyio.sleep_forever()

    async with EdgeClient("wss://127.0.0.1:8765") as client:  # pins the key on first use
        turn = await client.ask("What is an edge device?")
        print(turn.text)
"""

from ._access import (
    bearer_token,
    load_or_create_token,
    origin_allowed,
    read_token,
    rotate_token,
    token_matches,
    token_path,
)
from ._client import (
    ROUTER_SOURCE,
    ClientRequestError,
    EdgeClient,
    HelloRefused,
    TurnResult,
    local_token,
    reply_text,
)
from ._gateway import ClientError, Gateway
from ._hub import BACKEND_FAILED, TOO_LONG, OutputHub, ParticipantTaken
from ._limits import AudioPacer, ConnectionSlots, LogLimiter, printable
from ._mdns import WEBSOCKET_SERVICE, WYOMING_SERVICE, MdnsAdvertiser, discover
from ._pins import CertificateChanged, PinStore, ServerTrust
from ._protocol import (
    CLIENT_TYPES,
    MAX_TEXT_CHARS,
    NO_SPEECH,
    PARTICIPANT_ID_RULE,
    PROTOCOL_VERSION,
    AudioFormat,
    AudioMessage,
    ErrorMessage,
    InterruptedMessage,
    ProtocolError,
    QueryEcho,
    Reply,
    ServerMessage,
    Status,
    TranscriptMessage,
    check_participant_id,
    new_participant_id,
    parse_client_message,
)
from ._service import EdgeService
from ._service_models import SpeechParts
from ._service_parts import ServiceParts
from ._settings import ServiceSettings
from ._tls import TLSError, local_fingerprint
from ._websocket import AccessPolicy, WebSocketServer
from ._wyoming import WyomingServer

__all__ = [
    "BACKEND_FAILED",
    "CLIENT_TYPES",
    "MAX_TEXT_CHARS",
    "NO_SPEECH",
    "PARTICIPANT_ID_RULE",
    "PROTOCOL_VERSION",
    "ROUTER_SOURCE",
    "TOO_LONG",
    "WEBSOCKET_SERVICE",
    "WYOMING_SERVICE",
    "AccessPolicy",
    "AudioFormat",
    "AudioMessage",
    "AudioPacer",
    "CertificateChanged",
    "ClientError",
    "ClientRequestError",
    "ConnectionSlots",
    "EdgeClient",
    "EdgeService",
    "ErrorMessage",
    "Gateway",
    "HelloRefused",
    "InterruptedMessage",
    "LogLimiter",
    "MdnsAdvertiser",
    "OutputHub",
    "ParticipantTaken",
    "PinStore",
    "ProtocolError",
    "QueryEcho",
    "Reply",
    "ServerMessage",
    "ServerTrust",
    "ServiceParts",
    "ServiceSettings",
    "SpeechParts",
    "Status",
    "TLSError",
    "TranscriptMessage",
    "TurnResult",
    "WebSocketServer",
    "WyomingServer",
    "bearer_token",
    "check_participant_id",
    "discover",
    "load_or_create_token",
    "local_fingerprint",
    "local_token",
    "new_participant_id",
    "origin_allowed",
    "parse_client_message",
    "printable",
    "read_token",
    "reply_text",
    "rotate_token",
    "token_matches",
    "token_path",
]
