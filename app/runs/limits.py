"""``RunLimits``: what the settings bound a run by (its time, the history the model is shown, the
task's files, pending follow-ups), read from them in one place."""

from __future__ import annotations

from dataclasses import dataclass

from app.settings import Settings
from channel import task_files


@dataclass(frozen=True, slots=True)
class RunLimits:
    #: ``RUN_TIMEOUT``: seconds one run may take before it ends with an apology.
    run_timeout: float = 300.0
    #: ``HISTORY_LIMIT``: the most transcript messages the model is shown.
    history_limit: int = 400
    #: ``TASK_FILES_MAX_BYTES``: disk a task's fetched and produced files may use.
    files_max_bytes: int = task_files.DEFAULT_MAX_BYTES
    #: ``FOLLOW_UPS_MAX``: pending follow-ups (``channel_follow_up``) across the install.
    follow_ups_max: int = 1000
    #: ``USER_FILES_MAX_BYTES``: disk the files one person's requests saved may use (None: no cap).
    user_files_max_bytes: int | None = None
    #: ``FILES_MAX_BYTES``: disk every task's files may use together (None: no cap).
    install_files_max_bytes: int | None = None
    #: ``FOLLOW_UPS_PER_PERSON_MAX``: pending follow-ups one person's requests may have.
    follow_ups_per_person_max: int = 50
    #: ``FOLLOW_UPS_UNATTENDED_MAX``: follow-ups runs no person started may schedule in a row.
    follow_ups_unattended_max: int = 1

    @classmethod
    def of(cls, settings: Settings) -> RunLimits:
        return cls(
            run_timeout=settings.run_timeout,
            history_limit=settings.history_limit,
            files_max_bytes=settings.task_files_max_bytes,
            follow_ups_max=settings.follow_ups_max,
            user_files_max_bytes=settings.user_files_max_bytes or None,
            install_files_max_bytes=settings.files_max_bytes or None,
            follow_ups_per_person_max=settings.follow_ups_per_person_max,
            follow_ups_unattended_max=settings.follow_ups_unattended_max,
        )


#: No settings: the defaults above.
DEFAULT_LIMITS = RunLimits()
