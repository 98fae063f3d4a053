"""Intake: what arrives from Slack becomes durable work.

Holds the event router (does an event concern the bot, which conversation), the ingress (claim
and inbox append before the 200), click routing (``block_actions`` by ``action_id``), the
agent view's events, and the two transports deliveries arrive by: the HTTP edge (``http``) and
Socket Mode (``socket_mode``), both handing Slack's payloads to the same handlers.
May import ``app.runs``, ``app.agent``, ``app.settings``, ``app.logs``, ``app.clicks``,
``channel`` and ``storage``; nothing below imports it.
"""
