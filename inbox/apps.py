from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Job inbox"

    def ready(self) -> None:
        from core.db import install_session_settings
        from inbox import checks  # noqa: F401 - registers the system checks

        install_session_settings()
