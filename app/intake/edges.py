"""The two ways ``serve`` runs the HTTP edge: in a process of its own (``app.intake.edge_process``,
forked before the service was built) or on a thread of the service's process
(``app.intake.edge_thread``, ``EDGE_PROCESS=false`` or no ``fork``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .edge_process import EdgeFailed, EdgeProcess, Wiring, hello
from .edge_thread import EdgeThread
from .http import listen_error

if TYPE_CHECKING:
    from app.service import Service


async def start_edge(
    service: Service, forked: EdgeProcess | None, on_exit: Callable[[], None], wait: float
) -> EdgeThread | EdgeProcess:
    """The edge, serving once this returns; EdgeFailed (the service's own resources are the
    caller's to close) says why it could not. ``on_exit``: the edge's process stopped unasked;
    ``wait``: seconds a stopping edge lets requests in flight finish."""
    settings = service.settings
    if forked is not None:
        progress = service.progress if service.progress and service.progress.status_wanted else None
        wiring = Wiring(
            notify=service.runner.notify,
            delivered=service.ingress.on_result,
            external=service.ingress.on_external,
            ack_gate=service.runner.ack_gate,
            status=progress.edge_said if progress is not None else None,
            slack_call=service.observer.slack_call,
        )
        loading = progress.loading_messages if progress is not None else None
        said = hello(service.adapter.identity, wait, loading)
        try:  # acks in a process of their own
            await forked.start(service.web_app, wiring, said, on_exit)
        except EdgeFailed as exc:
            forked.kill()
            raise EdgeFailed(f"the HTTP edge process did not start: {exc}") from exc
        return forked
    edge = EdgeThread(
        service.http,
        service.ingress,
        service.store,
        service.agent_view,
        service.main,
        health_deadline=settings.health_deadline_s,
    )
    try:
        await edge.start(settings.host, settings.port, wait)  # acks on a loop of their own
    except OSError as exc:
        raise EdgeFailed(listen_error(settings.host, settings.port, exc)) from exc
    return edge
