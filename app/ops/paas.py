"""Platform-as-a-service hints: is the embedded database about to be thrown away?

Heroku dynos, Render services and Fly machines start from a fresh filesystem on
every deploy or restart, so a SQLite file there silently loses every task,
transcript and handle. Render disks and Fly volumes are mounts, which we can see.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from app.settings import Settings
from storage import sqlite_path


def ephemeral_platform(environ: Mapping[str, str]) -> str | None:
    """The platform name if the environment says we run on one with an ephemeral disk, else None."""
    if environ.get("DYNO"):
        return "Heroku"
    if environ.get("RENDER"):
        return "Render"
    if environ.get("FLY_APP_NAME"):
        return "Fly.io"
    return None


def _on_volume(path: Path, is_mount: Callable[[str], bool]) -> bool:
    # A mount point between the file and "/" is a persistent disk/volume (the root itself is the image).
    here = path.resolve(strict=False)
    return any(is_mount(str(p)) for p in (here, *here.parents) if p != Path(p.anchor))


def ephemeral_disk_warning(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    is_mount: Callable[[str], bool] = os.path.ismount,
) -> str | None:
    """A warning when the database is a SQLite file on a platform's ephemeral disk, else None."""
    platform = ephemeral_platform(os.environ if environ is None else environ)
    url = settings.resolved_database_url
    if platform is None or not url.lower().startswith("sqlite:"):
        return None
    try:
        db_file = sqlite_path(url)
    except ValueError:
        return None  # a malformed URL fails loudly elsewhere
    # Heroku has no volumes at all; elsewhere a mounted volume keeps the file.
    if platform != "Heroku" and _on_volume(db_file.parent, is_mount):
        return None
    what = f"the SQLite database {db_file}" if settings.database_url else f"DATA_DIR {settings.data_dir}"
    return (
        f"{what} is on {platform}'s ephemeral disk: "
        "tasks, transcripts and handles are lost on every deploy/restart; "
        "use DATABASE_URL=postgresql://… or a persistent volume"
    )


__all__ = ["ephemeral_disk_warning", "ephemeral_platform"]
