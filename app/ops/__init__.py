"""Operations: the commands beside ``serve`` (check, manifest, usage, run's target), metrics,
the observer that turns runs and Slack calls into metrics and log lines, and PaaS hints.

May import any app package but the playground (``usage`` opens the store as ``app.service`` does).
"""
