"""The one no-op task the peer runs."""

from django.tasks import task


@task
def noop() -> None:
    """Do nothing: the benchmark measures the queue, not the work."""
    return None
