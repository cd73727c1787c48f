"""RocketMQ 4.x remoting: frames, commands, and the TCP server and client that carry them."""

from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import LanguageCode, RemotingCommand, SerializeType
from mqcore.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from mqcore.remoting.server import RemotingProcessor, RemotingServer, ServerConnection

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingProcessor",
    "RemotingServer",
    "SerializeType",
    "ServerConnection",
]
