from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Job inbox"

    def ready(self) -> None:
        from core.db import declare_sqlite_json_probe, install_session_settings
        from inbox import checks  # noqa: F401 - registers the system checks

        install_session_settings()
        # SQLite's JSON support is asked without the write lock (see the function).
        declare_sqlite_json_probe()
