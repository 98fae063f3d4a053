"""Running a conversation: when a task runs, under which lease, and what one run does.

Holds the scheduler (one run per conversation, fed from the inbox), the lease, the run itself
(prompt, agent, checkpoints, save), streaming, compaction, progress and feedback notes.
May import ``app.agent``, the shared base (``app.settings``, ``app.logs``, ``app.clicks``), ``channel``
and ``storage``.
"""
