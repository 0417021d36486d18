"""spectool.testing: a scripted OpenAI-compatible model server, fake tools, a scripted drafter.

Everything here is dependency-free beyond the core (the server is a hand-written ASGI app) so
tests, examples and benchmarks run offline::

    model = ScriptedModel([call("get", key="a"), say("a is 1")])
    client = openai_client(model)                  # in-process (ASGI transport)
    async with SocketServer(model) as server:      # or a real localhost socket
        client = openai_client(server.url)
"""

from ._fakes import KeyValueWorld, ScriptedDrafter, ToolLog, fake_tool
from ._script import Reply, call, say
from ._server import ScriptedModel, read_body, send_json
from ._socket import ServerThread, SocketServer, asgi_http_client, openai_client

__all__ = [
    "KeyValueWorld",
    "Reply",
    "ScriptedDrafter",
    "ScriptedModel",
    "ServerThread",
    "SocketServer",
    "ToolLog",
    "asgi_http_client",
    "call",
    "fake_tool",
    "openai_client",
    "read_body",
    "say",
    "send_json",
]
