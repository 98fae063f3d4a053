"""A Slack workspace emulator: the Web API and file host over real HTTP on 127.0.0.1.

The tests, the benchmarks and the playground drive the real app against it::

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        ts = slack.add_message("C1", "hello", "U1")
        ...  # SLACK_API_URL=slack.api_url, SLACK_FILE_ORIGINS=slack.files_origin

Modules: ``workspace`` (users, conversations, messages, files: the state; its records in
``records``, Slack's threading rules in ``threads``),
``api`` (the Web API methods, one module per family), ``filehost`` (downloads,
sign-in page, upload targets), ``faults`` (scripted failures, shared with the fake
model server), ``server`` (``FakeSlack``: the HTTP server around them), ``socket_mode``
(``apps.connections.open`` and the Socket Mode WebSocket, ``FakeSlack.socket``), ``wire``
(parameter parsing and ``SlackError``). Deliberate choices where Slack's
behaviour is unknown or irrelevant are noted where they are made.
"""

from .faults import Fault, Faults
from .filehost import FileRequest
from .records import DEFAULT_SCOPES, FileMode, Status, Stream
from .server import Call, FakeSlack
from .socket_mode import Envelope, SocketMode
from .wire import SlackError
from .workspace import Workspace

__all__ = [
    "DEFAULT_SCOPES",
    "Call",
    "Envelope",
    "FakeSlack",
    "Fault",
    "Faults",
    "FileMode",
    "FileRequest",
    "SlackError",
    "SocketMode",
    "Status",
    "Stream",
    "Workspace",
]
