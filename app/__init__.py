"""threadbound's process: settings, CLI, HTTP server, routing, scheduler, agent runs, agent runtime."""
