from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """Every operator page, the access policy and request-id dedupe, roles and the demo."""

    name = "console"
    verbose_name = "Operator console"
