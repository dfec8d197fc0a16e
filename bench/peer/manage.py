"""manage.py of the throwaway django-tasks-db project (run only with the peer's own venv)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peer_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
