"""`make demo`: migrate, make sure an admin exists, and serve the console on 127.0.0.1:8000."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Set up and run the demo on the default database: migrate, create the 'admin' user "
        "(password from DEMO_PASSWORD, else generated and printed), and serve on "
        "127.0.0.1:8000 until Ctrl-C."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8000", help="host:port to serve on")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(12)
        User = get_user_model()
        user, _ = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"admin password: {password}")
        self.stdout.write(f"console: http://{options['bind']}/  (Ctrl-C stops)")
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", options["bind"]]
        )
        try:
            server.wait()
        except KeyboardInterrupt:
            server.terminate()
            server.wait(timeout=10)
