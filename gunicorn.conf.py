"""gunicorn reads this file from the working directory on start (the demo runs it from here).

It changes one thing: with ``LOG_FORMAT=json`` gunicorn's own lines (start, worker boot, errors)
are JSON objects like the rest of the console's logs (``core.logs``). Command-line options such
as ``--bind`` still win over anything set here.
"""

from core.logs import gunicorn_logconfig, json_enabled

if json_enabled():
    logconfig_dict = gunicorn_logconfig()
