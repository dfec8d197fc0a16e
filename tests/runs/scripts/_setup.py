"""Make a test script a Django process against the database in DATABASE_URL."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
