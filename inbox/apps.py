from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Job inbox"

    def ready(self) -> None:
        from inbox import checks  # noqa: F401 - registers the system checks
