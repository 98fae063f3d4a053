"""``python -m app playground``: a local, browser-based stand-in for a Slack workspace driving the real app.

``server`` (``Playground``: emulator + app + page, and ``run_playground``), ``view``
(the workspace as the page's JSON, Markdown rendered to HTML), ``demo`` (the
``--demo`` echo model), ``static/`` (the page: plain HTML, CSS and JavaScript).

Sits above the composition root: may import ``app.service`` and anything below it, and is the
only part of app that imports ``threadbound_emulator``; only ``app.__main__`` imports it.
"""

from .demo import demo_model
from .server import GENERAL, PEOPLE, Playground, ignored_settings, run_playground

__all__ = ["GENERAL", "PEOPLE", "Playground", "demo_model", "ignored_settings", "run_playground"]
