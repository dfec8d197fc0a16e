from django.apps import AppConfig


class StockAdminConfig(AppConfig):
    name = "bench.stockadmin"
    label = "stockadmin"
    verbose_name = "Stock admin (benchmark only)"
