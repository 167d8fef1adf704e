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

from ._access import load_or_create_token, read_token, rotate_token, token_path
from ._client import ClientRequestError, EdgeClient, HelloRefused, TurnResult, local_token
from ._gateway import ClientError, Gateway
from ._hub import OutputHub
from ._mdns import WEBSOCKET_SERVICE, WYOMING_SERVICE, MdnsAdvertiser, discover
from ._pins import CertificateChanged, PinStore, ServerTrust
from ._protocol import (
    CLIENT_TYPES,
    NO_SPEECH,
    PARTICIPANT_ID_RULE,
    PROTOCOL_VERSION,
    AudioFormat,
    AudioMessage,
    ErrorMessage,
    ProtocolError,
    Reply,
    TranscriptMessage,
    check_participant_id,
    new_participant_id,
    parse_client_message,
)
from ._service import EdgeService
from ._settings import ServiceSettings
from ._tls import TLSError, local_fingerprint
from ._websocket import WebSocketServer
from ._wyoming import WyomingServer

__all__ = [
    "CLIENT_TYPES",
    "NO_SPEECH",
    "PARTICIPANT_ID_RULE",
    "PROTOCOL_VERSION",
    "WEBSOCKET_SERVICE",
    "WYOMING_SERVICE",
    "AudioFormat",
    "AudioMessage",
    "CertificateChanged",
    "ClientError",
    "ClientRequestError",
    "EdgeClient",
    "EdgeService",
    "ErrorMessage",
    "Gateway",
    "HelloRefused",
    "MdnsAdvertiser",
    "OutputHub",
    "PinStore",
    "ProtocolError",
    "Reply",
    "ServerTrust",
    "ServiceSettings",
    "TLSError",
    "TranscriptMessage",
    "TurnResult",
    "WebSocketServer",
    "WyomingServer",
    "check_participant_id",
    "discover",
    "load_or_create_token",
    "local_fingerprint",
    "local_token",
    "new_participant_id",
    "parse_client_message",
    "read_token",
    "rotate_token",
    "token_path",
]
