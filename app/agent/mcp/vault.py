"""Per-person MCP credentials encrypted at rest: :class:`TokenVault` seals what the store keeps
(``Store.mcp_tokens``) with Fernet (AES-128-CBC with HMAC-SHA256) under ``MCP_TOKEN_KEY``.

``MCP_TOKEN_KEY`` holds one key or several, comma-separated: the first seals, every one opens, so a
key can be rotated by putting the new one first. A value sealed under a key no longer listed (or
changed by someone with the database but not the key) opens as None: the person is asked to
connect again, and nothing is shown.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

__all__ = ["TokenVault", "VaultKeyError", "new_key"]


class VaultKeyError(ValueError):
    """``MCP_TOKEN_KEY`` is not one or more Fernet keys; the message says how to make one."""


def new_key() -> str:
    """A fresh key for ``MCP_TOKEN_KEY``."""
    return Fernet.generate_key().decode()


class TokenVault:
    """Seals and opens JSON values with the keys of ``MCP_TOKEN_KEY`` (module doc)."""

    def __init__(self, keys: str) -> None:
        parts = [k.strip() for k in keys.split(",") if k.strip()]
        if not parts:
            raise VaultKeyError("MCP_TOKEN_KEY is empty")
        try:
            self._fernet = MultiFernet([Fernet(k.encode()) for k in parts])
        except (ValueError, TypeError) as exc:
            raise VaultKeyError(
                "MCP_TOKEN_KEY must be a Fernet key (32 url-safe base64-encoded bytes); make one with "
                '`python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`'
            ) from exc

    def seal(self, value: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps(value, separators=(",", ":")).encode()).decode()

    def open(self, sealed: str | None) -> dict[str, Any] | None:
        """The value sealed in ``sealed``, or None when there is none or no key of ours opens it."""
        if not sealed:
            return None
        try:
            value = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError):
            return None
        return value if isinstance(value, dict) else None
