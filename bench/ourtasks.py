"""The one no-op task our side of the throughput benchmark enqueues through ``django.tasks``
(``InboxTaskBackend``, queue ``default``): the same task as the peer's ``peer_tasks.noop``.

The executor imports it by its path (``bench.ourtasks.noop``) at run time; product code never
imports this module.
"""

from django.tasks import task


@task
def noop() -> None:
    """Do nothing: the benchmark measures the queue, not the work."""
    return None
