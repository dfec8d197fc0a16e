from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """Cross-app pages (dashboard, health checks), roles and the demo seed."""

    name = "console"
    verbose_name = "Operator console"
