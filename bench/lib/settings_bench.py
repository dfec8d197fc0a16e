"""Settings for the console benchmark: the product's settings plus the benchmark-only stock
admin (``bench/stockadmin``), the yardstick the console's lists are compared with.

Only ``bench/console.py`` loads this module; the product never registers the proxy model.
"""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.stockadmin.apps.StockAdminConfig"]
