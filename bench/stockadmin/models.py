"""A proxy of ``inbox.Job`` so a default ``ModelAdmin`` can be registered beside ours."""

from inbox.models import Job


class StockJob(Job):
    class Meta:
        proxy = True
        app_label = "stockadmin"
        verbose_name = "job (stock admin)"
