"""An MCP server that requires OAuth, with a small authorization server of its own, for tests.

Run ``python tests/support/mcp_oauth.py --port PORT``: the MCP endpoint is ``/mcp`` on 127.0.0.1,
protected with the MCP SDK's server-side auth (``mcp.server.auth``: protected-resource metadata,
bearer checks), and the same origin is the authorization server (metadata, dynamic client
registration, ``/authorize`` with PKCE, ``/token`` with refresh). ``/authorize`` sends the browser to
``/login?pending=…``, where the person is signed in as the ``X-Emulated-User`` header says (the
emulator's browser, ``threadbound_emulator.browser``); it redirects back to the client with a code.

Test controls: ``/test/revoke?user=NAME`` drops that person's tokens, ``/test/expire?user=NAME``
makes their access token expired (their refresh token still works), ``/test/tokens`` lists every
token issued (for canaries), ``/test/seen`` whom each tool call was for.
"""

from __future__ import annotations

import argparse
import secrets
import time
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response


class Provider:
    """An in-memory authorization server: clients, codes and tokens, each tied to a person."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, tuple[OAuthClientInformationFull, AuthorizationParams]] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.issued: list[str] = []
        self.seen: list[str] = []

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        pending = secrets.token_urlsafe(16)
        self.pending[pending] = (client, params)
        return f"/login?pending={pending}"

    def login(self, pending: str, user: str, deny: bool) -> str:
        client, params = self.pending.pop(pending)
        if deny:
            return construct_redirect_uri(str(params.redirect_uri), error="access_denied", state=params.state)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=str(client.client_id),
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=user,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: Any, authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _tokens(
        self, client_id: str, scopes: list[str], subject: str | None, resource: str | None
    ) -> OAuthToken:
        access, refresh = f"canary-at-{secrets.token_hex(12)}", f"canary-rt-{secrets.token_hex(12)}"
        self.issued += [access, refresh]
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + 3600,
            resource=resource, subject=subject,
        )  # fmt: skip
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(access_token=access, refresh_token=refresh, expires_in=3600, scope=" ".join(scopes))

    async def exchange_authorization_code(
        self, client: Any, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "code already used")
        code = authorization_code
        return self._tokens(str(client.client_id), code.scopes, code.subject, code.resource)

    async def load_refresh_token(self, client: Any, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: Any, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        kept = refresh_token
        return self._tokens(str(client.client_id), scopes or kept.scopes, kept.subject, kept.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def exchange_identity_assertion(self, *args: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "not offered here")

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)
        self.refresh.pop(getattr(token, "token", ""), None)

    def drop(self, user: str, *, keep_refresh: bool) -> None:
        for key, value in list(self.access.items()):
            if value.subject == user:
                if keep_refresh:
                    self.access[key] = value.model_copy(update={"expires_at": int(time.time()) - 10})
                else:
                    del self.access[key]
        if not keep_refresh:
            for key, refresh in list(self.refresh.items()):
                if refresh.subject == user:
                    del self.refresh[key]


def build(port: int) -> Any:
    origin = f"http://127.0.0.1:{port}"
    provider = Provider()
    server = MCPServer(
        "tickets",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=origin,  # type: ignore[arg-type]
            resource_server_url=f"{origin}/mcp",  # type: ignore[arg-type]
            client_registration_options=ClientRegistrationOptions(enabled=True),
            validate_token_resource=True,
        ),
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))  # reads only: no approval
    def whoami() -> str:
        """Who the service sees calling: the person whose account the token is for."""
        token = get_access_token()
        user = token.subject if token is not None and token.subject else "nobody"
        provider.seen.append(user)
        return user

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))  # reads only: no approval
    def my_tickets() -> list[str]:
        """The tickets assigned to the caller."""
        token = get_access_token()
        user = token.subject if token is not None and token.subject else "nobody"
        provider.seen.append(user)
        return [f"{user}'s ticket #1"]

    @server.custom_route("/login", methods=["GET"])
    async def login(request: Request) -> Response:
        # The emulator's browser says who is signed in; without it (or as "nobody") the person declines.
        pending, user = request.query_params["pending"], request.headers.get("X-Emulated-User", "")
        user = "" if user == "nobody" else user
        return RedirectResponse(provider.login(pending, user, deny=not user), status_code=302)

    @server.custom_route("/test/revoke", methods=["GET"])
    async def revoke(request: Request) -> Response:
        provider.drop(request.query_params["user"], keep_refresh=False)
        return JSONResponse({"ok": True})

    @server.custom_route("/test/expire", methods=["GET"])
    async def expire(request: Request) -> Response:
        provider.drop(request.query_params["user"], keep_refresh=True)
        return JSONResponse({"ok": True})

    @server.custom_route("/test/tokens", methods=["GET"])
    async def tokens(request: Request) -> Response:
        return JSONResponse(
            {"issued": provider.issued, "clients": [c.client_id for c in provider.clients.values()]}
        )

    @server.custom_route("/test/seen", methods=["GET"])
    async def seen(request: Request) -> Response:
        return JSONResponse({"seen": provider.seen})

    return server.streamable_http_app()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(build(port), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
