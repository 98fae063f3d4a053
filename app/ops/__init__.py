"""Operations: the commands beside ``serve`` (check, manifest, usage, run's target), metrics,
the observer that turns runs and Slack calls into metrics and log lines, and PaaS hints."""
