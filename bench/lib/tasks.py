"""The no-op task the throughput benchmark sends through ``django.tasks`` on the project's task
backend (queue ``default``): the same task as the peer's ``peer_tasks.noop``.

The executor imports it by its path (``bench.lib.tasks.noop``) when it runs a job; product code
never imports this module.
"""

from django.tasks import task


@task
def noop() -> None:
    """Do nothing: the benchmark measures the queue, not the work."""
    return None
