from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Job inbox"

    def ready(self) -> None:
        from inbox import checks  # noqa: F401 - registers the system checks
        from inbox.dbcheck import declare_sqlite_json_probe

        # SQLite's JSON support is asked without the write lock (see the function).
        declare_sqlite_json_probe()
