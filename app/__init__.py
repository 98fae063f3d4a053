"""threadbound's process: settings, CLI, HTTP server, routing, task runner, agent runtime."""
