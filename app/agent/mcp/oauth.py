"""Per-person authorization for remote MCP servers: each call carries the token of the person whose
message led to it, obtained with MCP's authorization flow, kept encrypted in the store.

- **The flow** is the MCP SDK's (``mcp.client.auth.OAuthClientProvider``): on a 401 it reads the
  server's protected-resource and authorization-server metadata, registers a client (dynamic client
  registration) unless the operator configured ``client_id``/``client_secret``, refreshes an expired
  token with its refresh token, and checks the resource (RFC 8707). Only the interactive step differs:
  a Slack app cannot hold a call open while a person visits a page, so :class:`PersonProvider`
  records the authorization (its PKCE verifier sealed, its ``state`` stored only as a SHA-256) and
  raises :class:`AuthorizationRequested`; the person gets a private link, and the run ends waiting
  as for an ask.
- **The callback** (``GET /oauth/callback`` on the app's own port, :meth:`PersonalAccess.complete`)
  finds the authorization by its state — unforgeable (256 random bits) and single-use (decided once,
  across instances) — exchanges the code with the verifier, stores the tokens, and decides the
  authorization, which appends the item that resumes the task (``app.agent.mcp.authorizations``). A
  denial, a failed exchange or a link older than ``APPROVAL_TTL`` resumes it too, saying so.
- **Tokens** live only in ``Store.mcp_tokens``, sealed by :class:`~app.agent.mcp.vault.TokenVault`
  (``MCP_TOKEN_KEY``). A refresh that fails, or a token the server refuses, removes them, and the
  next call asks the person again. They never reach the model, a log line, a trace, ``check`` or
  the playground page (The token stays home, docs/architecture.md).

The MCP SDK is imported when a per-person server is first used, not with this module.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from app.agent.mcp.authorizations import Outcome, payload
from storage.sqlstore_mcp_tokens import McpAuthorization, McpTokens

if TYPE_CHECKING:
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    from app.agent.mcp.vault import TokenVault

log = logging.getLogger(__name__)

#: Shows a person a private note with a link in their conversation: channel, user, text, thread.
Offer = Callable[[str, str, str, str], Awaitable[None]]
CALLBACK_PATH = "/oauth/callback"
# Seconds before its stated expiry a token counts as expired (a call must not race the clock).
_EXPIRY_MARGIN = 30.0


@dataclass(frozen=True, slots=True)
class Person:
    """Whom a call acts for, and where the task that made it waits."""

    user: str
    task_id: str
    channel: str
    thread_ts: str


@dataclass(frozen=True, slots=True)
class ServerAuth:
    """What the flow needs of a per-person server's configuration (``${VAR}`` expanded)."""

    name: str
    url: str
    client_id: str = ""
    client_secret: str = ""
    scopes: tuple[str, ...] = ()


class AuthorizationRequested(Exception):
    """The person has no usable token: they were sent a private link, and nothing was called."""


class _AskingIsNoError(logging.Filter):
    """The SDK logs any exception of its flow at ERROR with a traceback; asking a person is not one."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[1] if record.exc_info else None
        return not isinstance(raised, AuthorizationRequested)


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class StoredTokens:
    """The SDK's ``TokenStorage`` over the store, sealed: one person's tokens for one server, and the
    server's client (the operator's, or the one registered dynamically, shared by everyone)."""

    def __init__(self, access: PersonalAccess, server: ServerAuth, user: str) -> None:
        self._access, self._server, self._user = access, server, user
        #: When the stored access token expires (seconds since the epoch), if it said.
        self.expires_at: float | None = None

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        value = self._access.vault.open(await self._access.tokens.get(self._server.name, self._user))
        if value is None or not isinstance(value.get("token"), dict):
            return None
        expires = value.get("expires_at")
        self.expires_at = float(expires) if isinstance(expires, int | float) else None
        return OAuthToken.model_validate(value["token"])

    async def set_tokens(self, tokens: OAuthToken) -> None:
        now = self._access.clock()
        expires_at = now + tokens.expires_in if tokens.expires_in else None
        sealed = self._access.vault.seal({"token": tokens.model_dump(mode="json"), "expires_at": expires_at})
        await self._access.tokens.put(self._server.name, self._user, sealed, now=now)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        if self._server.client_id:
            secret = self._server.client_secret or None
            return OAuthClientInformationFull(
                client_id=self._server.client_id,
                client_secret=secret,
                redirect_uris=[self._access.redirect_uri],  # type: ignore[list-item]
                token_endpoint_auth_method="client_secret_post" if secret else "none",
            )
        value = self._access.vault.open(await self._access.tokens.get(self._server.name, ""))
        return None if value is None else OAuthClientInformationFull.model_validate(value)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self._server.client_id:
            return  # the operator's client is configured, not stored
        sealed = self._access.vault.seal(client_info.model_dump(mode="json", exclude_none=True))
        await self._access.tokens.put(self._server.name, "", sealed, now=self._access.clock())


def provider(
    access: PersonalAccess, server: ServerAuth, person: Person, *, quiet: bool = False
) -> OAuthClientProvider:
    """The SDK's provider for ``person`` on ``server``, whose interactive step asks the person
    privately and raises :class:`AuthorizationRequested` (module doc); ``quiet``: raises without
    asking (listing tools at start-up with someone's stored token)."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    flow_log = logging.getLogger("mcp.client.auth.oauth2")
    if not any(isinstance(f, _AskingIsNoError) for f in flow_log.filters):
        flow_log.addFilter(_AskingIsNoError())

    class PersonProvider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            # The SDK keeps a token's expiry only in memory; the store remembers it, so a token that
            # expired while nobody called is refreshed before it is sent, not after a refusal.
            expires = storage.expires_at
            self.context.token_expiry_time = None if expires is None else expires - _EXPIRY_MARGIN

        async def _perform_authorization_code_grant(self) -> tuple[str, str]:
            if quiet:
                raise AuthorizationRequested(server.name)
            await access.ask(self, server, person)
            raise AssertionError("unreachable")  # pragma: no cover

    storage = StoredTokens(access, server, person.user)
    grant = "client_secret_post" if server.client_secret else "none"
    metadata = OAuthClientMetadata(
        redirect_uris=[access.redirect_uri],  # type: ignore[list-item]
        client_name="threadbound",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=grant,  # type: ignore[arg-type]
        scope=" ".join(server.scopes) or None,
    )
    return PersonProvider(server.url, metadata, storage)


class PersonalAccess:
    """Per-person tokens of every per-person server: the flow's store, vault and callback (module doc)."""

    def __init__(
        self,
        tokens: McpTokens,
        vault: TokenVault,
        public_url: str,
        offer: Offer,
        *,
        ttl: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.vault = vault
        self.redirect_uri = public_url.rstrip("/") + CALLBACK_PATH
        self.offer = offer
        self.ttl = ttl
        self.clock = clock
        #: The servers by name (their flow settings), for the callback's token exchange.
        self.servers: dict[str, ServerAuth] = {}
        #: Called with a server's name and the person once they connected it (its tools may be listed now).
        self.on_connected: Callable[[str, str], Awaitable[bool]] | None = None
        #: Wakes a task whose authorization was decided (``Scheduler.notify``).
        self.wake: Callable[[str], None] = lambda task_id: None

    async def ask(self, flow: OAuthClientProvider, server: ServerAuth, person: Person) -> None:
        """Record an authorization for ``person``, send them its link, raise AuthorizationRequested.

        Runs where the SDK would send the person's browser to the authorization endpoint: the metadata
        is discovered and the client registered by then."""
        from mcp.client.auth.oauth2 import PKCEParameters

        context = flow.context
        # A token that got here was refused or could not be refreshed: it is removed, not kept.
        await self.tokens.delete(server.name, person.user)
        if context.client_info is None or context.oauth_metadata is None:
            # Nobody was asked: the call fails (tool_failed), saying why.
            raise RuntimeError(f"{server.name}: its authorization server's metadata could not be discovered")
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        query = {
            "response_type": "code",
            "client_id": context.client_info.client_id,
            "redirect_uri": self.redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
        }
        resource = ""
        if context.should_include_resource_param(context.protocol_version):
            resource = query["resource"] = context.get_resource_url()
        if context.client_metadata.scope:
            query["scope"] = context.client_metadata.scope
        sealed = self.vault.seal(
            {
                "verifier": pkce.code_verifier,
                "token_endpoint": str(context.oauth_metadata.token_endpoint),
                "resource": resource,
                "scope": context.client_metadata.scope or "",
            }
        )
        now = self.clock()
        # An earlier link of this person for this server in this task stops working (and wakes nobody).
        for old in await self.tokens.open_for(server.name, person.user, person.task_id):
            await self.tokens.decide_authorization(old, decision="expired", user_id="", payload="", now=now)
        record = McpAuthorization(
            state_hash(state), server.name, person.user, person.task_id, person.channel,
            person.thread_ts, sealed, now, None,
        )  # fmt: skip
        await self.tokens.open_authorization(record)
        url = f"{context.oauth_metadata.authorization_endpoint}?{urlencode(query)}"
        text = (
            f"To let me use {server.name} as you, connect your account (this link is only for you and "
            f"works once): {url}"
        )
        await self.offer(person.channel, person.user, text, person.thread_ts)
        log.info("asked a person to connect MCP server %s", server.name)
        raise AuthorizationRequested(server.name)

    async def complete(self, query: Mapping[str, str]) -> tuple[int, str]:
        """``GET /oauth/callback``: the page's status and text (module doc)."""
        state = query.get("state", "")
        record = await self.tokens.get_authorization(state_hash(state)) if state else None
        if record is None:
            return 400, "This link is not known here. Ask again in Slack for a new one."
        if record.decision == "expired":
            return 410, "This link expired. Ask again in Slack for a new one."
        if record.decision is not None:
            return 410, "This link was already used. Ask again in Slack if you still need to connect."
        now = self.clock()
        if now - record.created_at > self.ttl:
            await self._decide(record, "expired", now)
            return 410, "This link expired. Ask again in Slack for a new one."
        if query.get("error") or not query.get("code"):
            await self._decide(record, "declined", now)
            return 200, f"You did not connect {record.server}. You can close this page."
        try:
            await self._exchange(record, query["code"])
        except Exception as exc:  # the exchange's reasons may quote what the server sent: not shown
            log.warning("MCP server %s: the token exchange failed (%s)", record.server, type(exc).__name__)
            await self._decide(record, "failed", now)
            return 502, f"{record.server} did not give a token. Ask again in Slack to retry."
        if self.on_connected is not None:  # before the task wakes: its run then finds the tools
            await self.on_connected(record.server, record.user_id)
        if not await self._decide(record, "connected", now):
            return 410, "This link was already used."
        return 200, f"Connected {record.server}. You can close this page and go back to Slack."

    async def _decide(self, record: McpAuthorization, outcome: Outcome, now: float) -> bool:
        won = await self.tokens.decide_authorization(
            record.state_hash,
            decision=outcome,
            user_id=record.user_id,
            payload=payload(record.server, record.user_id, outcome),
            now=now,
        )
        if won:
            self.wake(record.task_id)
        return won

    async def _exchange(self, record: McpAuthorization, code: str) -> None:
        import httpx2
        from mcp.client.auth.oauth2 import OAuthContext
        from mcp.client.auth.utils import handle_token_response_scopes
        from mcp.shared.auth import OAuthClientMetadata

        server = self.servers[record.server]
        kept = self.vault.open(record.secret)
        storage = StoredTokens(self, server, record.user_id)
        client = await storage.get_client_info()
        if kept is None or client is None:
            raise RuntimeError("the authorization's secret or the server's client is gone")
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": client.client_id,
            "code_verifier": str(kept["verifier"]),
        }
        if kept.get("resource"):
            data["resource"] = str(kept["resource"])
        metadata = OAuthClientMetadata(redirect_uris=[self.redirect_uri])  # type: ignore[list-item]
        context = OAuthContext(server.url, metadata, storage, None, None, client_info=client)
        data, headers = context.prepare_token_auth(
            data, {"Content-Type": "application/x-www-form-urlencoded"}
        )
        async with httpx2.AsyncClient(timeout=30.0, follow_redirects=False) as http:
            response = await http.post(str(kept["token_endpoint"]), data=data, headers=headers)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"token endpoint answered {response.status_code}")
        token = await handle_token_response_scopes(response)
        if token.scope is None and kept.get("scope"):
            token.scope = str(kept["scope"])
        await storage.set_tokens(token)

    async def disconnect(self, server: str, user: str) -> bool:
        """Forget ``user``'s tokens for ``server``; whether there were any."""
        return await self.tokens.delete(server, user)

    async def sweep(self) -> int:
        """Decide ``expired`` the links older than the TTL nobody used (resuming their tasks)."""
        now = self.clock()
        expired = 0
        for hashed in await self.tokens.expired_authorizations(before=now - self.ttl):
            record = await self.tokens.get_authorization(hashed)
            if record is not None and await self._decide(record, "expired", now):
                expired += 1
        return expired


__all__ = [
    "CALLBACK_PATH",
    "AuthorizationRequested",
    "Person",
    "PersonalAccess",
    "ServerAuth",
    "StoredTokens",
    "provider",
    "state_hash",
]
