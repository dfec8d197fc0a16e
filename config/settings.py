"""Settings for the Job & Run Console.

Local development runs on an embedded SQLite file under ``var/`` with safe defaults. Set
``CONSOLE_ENV=production`` for the hardened profile (it refuses to start without
``DJANGO_SECRET_KEY`` and ``DJANGO_ALLOWED_HOSTS``). ``DATABASE_URL`` selects PostgreSQL or
another SQLite file.
"""

import datetime as dt
import importlib.util
import os
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONSOLE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

CONSOLE_ENV = os.environ.get("CONSOLE_ENV", "development").strip().lower()
if CONSOLE_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(
        f"CONSOLE_ENV={CONSOLE_ENV!r} is not known; use 'development' or 'production'."
    )
PRODUCTION = CONSOLE_ENV == "production"


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


if PRODUCTION:
    # A blank value (" ", ",") is as missing as an absent one: no key, no host to serve.
    missing = [
        n
        for n in ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS")
        if not os.environ.get(n, "").replace(",", "").strip()
    ]
    if missing:
        raise ImproperlyConfigured(
            "CONSOLE_ENV=production needs " + " and ".join(missing) + " in the environment."
        )
    SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
    DEBUG = False
else:
    # A fixed, obviously-local key: development sessions survive restarts.
    SECRET_KEY = os.environ.get(
        "DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me-0123456789abcdefghijklmnop"
    )
    DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"

ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_tables2",
    "django_filters",
    "audit",
    "inbox",
    "runs",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# --- Hardening: request guards and error pages (console/middleware.py) ---------------------
# NUL bytes are refused before the session or any view reads the request; view exceptions
# become styled 400/403/404 pages and a busy database a 503, in DEBUG and production alike.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware"),
    "console.middleware.RefuseNulMiddleware",
)
MIDDLEWARE.append("console.middleware.ErrorPagesMiddleware")
# Outermost: every error answer under /api/ leaves as a JSON problem (console/problems.py).
MIDDLEWARE.insert(0, "console.problems.ApiProblemsMiddleware")
# --- end of the hardening block ----------------------------------------------------------------

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------------
# SQLite: WAL lets readers run beside the single writer; IMMEDIATE makes every atomic() take the
# write lock up front (so guarded UPDATEs serialise instead of failing with "database is
# locked"); synchronous=FULL because a job system must not lose a committed claim on power loss.
# How long a writer waits for SQLite's write lock before "database is locked" (seconds).
SQLITE_BUSY_TIMEOUT = float(os.environ.get("SQLITE_BUSY_TIMEOUT", "30"))
if SQLITE_BUSY_TIMEOUT <= 0:
    raise ImproperlyConfigured(f"SQLITE_BUSY_TIMEOUT must be positive, got {SQLITE_BUSY_TIMEOUT}")
# Django's SQLite backend with BEGIN and COMMIT sent straight to the driver (core.db says why).
SQLITE_ENGINE = "core.backends.sqlite3"
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": SQLITE_BUSY_TIMEOUT,
    "init_command": (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
        f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT * 1000)}; PRAGMA foreign_keys=ON;"
    ),
}

# --- No wait without a bound (PostgreSQL) -------------------------------------------------------
# Every session: a row lock is waited on for at most DB_LOCK_TIMEOUT_MS (then the operation is
# refused as busy, nothing written), a statement runs at most DB_STATEMENT_TIMEOUT_MS, and a
# transaction left idle (a frozen process, a paused VM) is ended by the server after
# DB_IDLE_IN_TRANSACTION_TIMEOUT_MS, which frees its locks. 0 turns one off. `migrate` runs
# without the statement timeout (index builds on big tables take longer).
DB_LOCK_TIMEOUT_MS = int(os.environ.get("DB_LOCK_TIMEOUT_MS", "1500"))
DB_STATEMENT_TIMEOUT_MS = int(os.environ.get("DB_STATEMENT_TIMEOUT_MS", "30000"))
DB_IDLE_IN_TRANSACTION_TIMEOUT_MS = int(
    os.environ.get("DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "10000")
)
if sys.argv[1:2] == ["migrate"]:
    DB_STATEMENT_TIMEOUT_MS = 0
# core.db.prepared_cursor: executions of one statement text before psycopg prepares it (direct
# connections only; behind PgBouncer nothing is prepared).
DB_PREPARE_THRESHOLD = int(os.environ.get("DB_PREPARE_THRESHOLD", "5"))
if DB_PREPARE_THRESHOLD < 0:
    raise ImproperlyConfigured(
        f"DB_PREPARE_THRESHOLD must be 0 (off) or more, got {DB_PREPARE_THRESHOLD}"
    )
# Seconds a PostgreSQL connect may take (libpq's connect_timeout; at least 2).
DB_CONNECT_TIMEOUT_S = int(os.environ.get("DB_CONNECT_TIMEOUT_S", "5"))
if DB_CONNECT_TIMEOUT_S < 2:
    raise ImproperlyConfigured(
        f"DB_CONNECT_TIMEOUT_S must be at least 2 (libpq's floor), got {DB_CONNECT_TIMEOUT_S}"
    )
DB_SESSION_TIMEOUTS_MS = {
    "lock_timeout": DB_LOCK_TIMEOUT_MS,
    "statement_timeout": DB_STATEMENT_TIMEOUT_MS,
    "idle_in_transaction_session_timeout": DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
}
# "pgbouncer": PostgreSQL is reached through PgBouncer in transaction-pooling mode. Nothing may
# rely on session state then: no server-side prepared statements or cursors, and the timeouts
# above are set per transaction (SET LOCAL, see core.db) instead of in the connection options.
DATABASE_POOLER = os.environ.get("DATABASE_POOLER", "").strip().lower()
if DATABASE_POOLER not in {"", "pgbouncer"}:
    raise ImproperlyConfigured(
        f"DATABASE_POOLER={DATABASE_POOLER!r}: use 'pgbouncer' or leave it unset"
    )


def _database_from_env() -> dict:
    url = os.environ.get("DATABASE_URL", "").strip()
    # Kept connections: a worker that reconnected every turn would reopen the file (and re-run
    # the pragmas) or the PostgreSQL session for every batch. Health checks catch a dead one.
    max_age = int(os.environ.get("CONN_MAX_AGE", "60"))
    if not url:
        return {
            "ENGINE": SQLITE_ENGINE,
            "NAME": VAR_DIR / "console.sqlite3",
            "OPTIONS": dict(SQLITE_OPTIONS),
            "CONN_MAX_AGE": max_age,
            "CONN_HEALTH_CHECKS": True,
            "TEST": {"NAME": str(VAR_DIR / "test-console.sqlite3")},
        }
    config = dj_database_url.parse(url, conn_max_age=max_age)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["ENGINE"] = SQLITE_ENGINE
        config["OPTIONS"] = dict(SQLITE_OPTIONS)
        config["CONN_HEALTH_CHECKS"] = True
        # Tests against SQLite must use a file: the in-memory test DB hides races.
        config["TEST"] = {"NAME": str(Path(config["NAME"]).with_suffix(".test.sqlite3"))}
    else:
        config["CONN_HEALTH_CHECKS"] = True
        options = config.setdefault("OPTIONS", {})
        # A connect to a host that drops packets would otherwise wait for the kernel's TCP
        # timeout (minutes); a worker gives up after this and backs off (inbox.outage).
        options.setdefault("connect_timeout", DB_CONNECT_TIMEOUT_S)
        if DATABASE_POOLER == "pgbouncer":
            options["prepare_threshold"] = None  # no server-side prepared statements
            config["DISABLE_SERVER_SIDE_CURSORS"] = True
        else:
            options["options"] = " ".join(f"-c {k}={v}" for k, v in DB_SESSION_TIMEOUTS_MS.items())
            # The few hand-written statements a worker repeats (core.db.prepared_cursor) are
            # prepared after this many runs on a connection; Django's own cursors bind on the
            # client and are never prepared. 0 turns preparing off.
            options["prepare_threshold"] = DB_PREPARE_THRESHOLD or None
    return config


DATABASES = {"default": _database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:home"
LOGOUT_REDIRECT_URL = "console:login"

STATIC_URL = "static/"
# Production serves the hashed files `collectstatic` wrote here; development serves straight
# from the app and project static folders (no collectstatic step, no missing-folder warning).
STATIC_ROOT = (
    Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
    if PRODUCTION or os.environ.get("STATIC_ROOT")
    else None
)
WHITENOISE_USE_FINDERS = not PRODUCTION
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- Security ----------------------------------------------------------------------------------
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True

if PRODUCTION:
    SECURE_SSL_REDIRECT = os.environ.get("DJANGO_SECURE_SSL_REDIRECT", "1") == "1"
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(60 * 60 * 24 * 365)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if not SECURE_SSL_REDIRECT:
        # TLS is terminated and enforced by the proxy; say so to `check --deploy`.
        SILENCED_SYSTEM_CHECKS = ["security.W008"]

# --- Domain settings ---------------------------------------------------------------------------
VAULT_ROOT = Path(os.environ.get("VAULT_ROOT", VAR_DIR / "vault"))
# Largest SAVE_OBJECT content accepted, in bytes (UTF-8).
INBOX_MAX_CONTENT_BYTES = int(os.environ.get("INBOX_MAX_CONTENT_BYTES", str(1024 * 1024)))
# Attempts an idempotent job gets before a lapsed lease fails it with MAX_ATTEMPTS.
INBOX_MAX_ATTEMPTS = int(os.environ.get("INBOX_MAX_ATTEMPTS", "5"))
# How long a DELETE approval stays valid (the executor re-checks it right before executing).
INBOX_APPROVAL_TTL_SECONDS = int(os.environ.get("INBOX_APPROVAL_TTL_SECONDS", str(24 * 3600)))
# Extra job types: {"NAME": {"scope": ..., "idempotent": ..., "handler": "dotted.path", ...}}.
INBOX_JOB_TYPES: dict = {}
# The consolidator runs use (dotted path to a class or factory; see runs/consolidators.py).
RUNS_CONSOLIDATOR = os.environ.get("RUNS_CONSOLIDATOR", "runs.consolidators.VaultDeduplicator")
# An effectively active run (its lease still running) without progress for longer than this is
# flagged stuck, as is one whose owner's heartbeat is dead; stuck is derived, never stored.
RUNS_STUCK_AFTER_SECONDS = int(os.environ.get("RUNS_STUCK_AFTER_SECONDS", "300"))

# --- Tasks: django.tasks through the inbox (docs/tasks.md) --------------------------------------
# Each queue is an executor scope: `manage.py run_executor --scope default` runs its tasks.
TASKS = {"default": {"BACKEND": "inbox.tasks.InboxTaskBackend", "QUEUES": ["default"]}}
# Largest JSON of a task's arguments, and of its return value (kept in the audit trail), bytes.
INBOX_TASK_MAX_JSON_BYTES = int(os.environ.get("INBOX_TASK_MAX_JSON_BYTES", str(1024 * 1024)))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"},
    },
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "root": {"handlers": ["stderr"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Each task's start and finish is in the audit trail; a failure still logs (ERROR).
        "django.tasks": {"level": "WARNING"},
    },
}

# --- Ecosystem: /metrics, the producer API, JSON logs, retention ----------------------------
# /metrics answers a request with "Authorization: Bearer <METRICS_TOKEN>"; without the setting
# it answers loopback clients only (and refuses what a proxy forwarded: X-Forwarded-For).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "").strip()
# Job counts in /metrics are exact up to this many per state; above it, estimated (PostgreSQL:
# a repeatable ~5,000-row TABLESAMPLE scaled to the planner's row count) or capped (SQLite).
METRICS_EXACT_COUNT_CAP = int(os.environ.get("METRICS_EXACT_COUNT_CAP", "1000"))
# POST /api/v1/jobs: most documents in one list, and the largest body accepted (413 beyond).
API_MAX_JOBS_PER_REQUEST = int(os.environ.get("API_MAX_JOBS_PER_REQUEST", "1000"))
API_MAX_BODY_BYTES = int(os.environ.get("API_MAX_BODY_BYTES", str(16 * 1024 * 1024)))
# The producer API's browsable docs render django-ninja's own template and static Swagger UI
# files (``console.api.LocalSwagger``). Its folders are listed here rather than ninja being an
# installed app: an app is imported at app population, in every worker and command too, and
# ninja brings pydantic (a fifth of an executor's start-up). ``find_spec`` does not import it.
_NINJA_DIR = Path(importlib.util.find_spec("ninja").origin).parent
TEMPLATES[0]["DIRS"].append(_NINJA_DIR / "templates")
STATICFILES_DIRS.append(_NINJA_DIR / "static")
# LOG_FORMAT=json: one JSON object a line (worker, job and claim ids where they apply) for the
# web server, the workers and the commands; anything else keeps the plain format.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain").strip().lower()
if LOG_FORMAT == "json":
    LOGGING["formatters"]["json"] = {"()": "core.logs.JsonFormatter"}
    LOGGING["handlers"]["stderr"]["formatter"] = "json"

# --- Hardening: max_attempts >= 1, the audit's history -------------------------------------------
# The database refuses a job with max_attempts < 1 (a check constraint); refuse the setting that
# would make every new job violate it here, at start-up, with a message that names it.
if INBOX_MAX_ATTEMPTS < 1:
    raise ImproperlyConfigured(
        f"INBOX_MAX_ATTEMPTS must be at least 1 (got {INBOX_MAX_ATTEMPTS}): every job needs one."
    )
# Unapplying the audit app's migrations erases the history: refused unless this says so
# (AUDIT_ALLOW_ERASING_HISTORY=1 for the one command that means it; see audit/history.py).
AUDIT_ALLOW_ERASING_HISTORY = os.environ.get("AUDIT_ALLOW_ERASING_HISTORY", "") == "1"
# --- end of the hardening block ----------------------------------------------------------------

# --- Hardening: login throttling with django-axes ------------------------------------------------
# LOGIN_FAILURE_LIMIT failed logins for one user name, or from one address, lock that user name
# or address out for LOGIN_COOLOFF_MINUTES; a success resets the count. Admins see lockouts under
# Admin → Axes (delete an attempt to clear it) and clear them with `manage.py axes_reset` (or
# axes_reset_username USER, axes_reset_ip ADDRESS). Behind a TLS proxy set
# CONSOLE_TRUSTED_PROXIES to the number of proxies that append to X-Forwarded-For, else every
# client shares the proxy's address.
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as django-axes requires
# ConsoleModelBackend is Django's ModelBackend with a one-query permission lookup (console/auth.py):
# every page and poll checks a permission, and Django's two ORM queries were most of a poll's CPU.
AUTHENTICATION_BACKENDS = [
    "console.login.LoginThrottleBackend",
    "console.auth.ConsoleModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = dt.timedelta(minutes=float(os.environ.get("LOGIN_COOLOFF_MINUTES", "15")))
# Each parameter on its own: a user name *or* an address reaching the limit is locked out.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "console.login.login_locked_out"
AXES_CLIENT_IP_CALLABLE = "console.login.client_ip"
CONSOLE_TRUSTED_PROXIES = int(os.environ.get("CONSOLE_TRUSTED_PROXIES", "0"))
# Lockouts are warnings; the start-up banner and each failure (INFO) would fill every command's
# output.
LOGGING["loggers"]["axes"] = {"level": os.environ.get("AXES_LOG_LEVEL", "WARNING")}
if AXES_FAILURE_LIMIT < 1 or CONSOLE_TRUSTED_PROXIES < 0:
    raise ImproperlyConfigured(
        "LOGIN_FAILURE_LIMIT must be at least 1 and CONSOLE_TRUSTED_PROXIES at least 0."
    )
# --- end of the hardening block ----------------------------------------------------------------

# --- Live regions shared between operators (console/livecache.py) ------------------------------
# A poll of a global region (the dashboard's) within this share of its poll interval of another
# operator's is answered from that reading: at most that much older than the database, and read
# once per interval share and web process however many operators watch. 0 turns sharing off.
_live_cache = os.environ.get("CONSOLE_LIVE_CACHE", "0.5")
try:
    CONSOLE_LIVE_CACHE = float(_live_cache)
except ValueError:
    CONSOLE_LIVE_CACHE = -1.0
if not 0 <= CONSOLE_LIVE_CACHE <= 1:
    raise ImproperlyConfigured(
        f"CONSOLE_LIVE_CACHE must be a share of the poll interval from 0 to 1, got {_live_cache!r}"
    )
