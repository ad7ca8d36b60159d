"""Settings, read once from the environment (docs/reference/configuration.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from config.env import (
    database_from_url,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_origins,
    env_str,
    secret_key,
)
from core.version import VERSION

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1")

DEFAULT_DATABASE_URL = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASE_URL = env_str("DATABASE_URL", "") or DEFAULT_DATABASE_URL
DATABASES = {"default": database_from_url("DATABASE_URL", DATABASE_URL)}
# The assignment hot path's statements prepared once per connection (core/database.py).
# Off behind a pooler that cannot keep prepared statements: PgBouncer in transaction mode
# before 1.21, or with max_prepared_statements = 0 (docs/how-to/deploy.md).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", True)
# Bounds on the web server's database work, in milliseconds (0: none), given to the PostgreSQL
# connections of a process with DATABASE_REQUEST_TIMEOUTS on: deploy/gunicorn.conf.py turns it on
# for the web server (raw_env); management commands that read or write billions of rows, and
# migrations, run without them. A request blocked by a lock or a slow statement answers 503
# database_unavailable within about 10 s, far inside GUNICORN_TIMEOUT.
DATABASE_REQUEST_TIMEOUTS = env_bool("DATABASE_REQUEST_TIMEOUTS", False)
# The database connections of each process of config.asgi (core/edge/pool.py), and its threads for what the
# event loop cannot send: the API requests one process works on at once.
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 4, minimum=1, maximum=256)
DATABASE_STATEMENT_TIMEOUT_MS = env_int("DATABASE_STATEMENT_TIMEOUT_MS", 3000, minimum=0)
DATABASE_LOCK_TIMEOUT_MS = env_int("DATABASE_LOCK_TIMEOUT_MS", 2000, minimum=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Persistent connections. A kept one that broke (a database restart) is replaced
    # without a round trip per request: core.middleware.guards.ConnectionCheckMiddleware
    # before staff pages, core.database.with_live_connection on the API.
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 600, minimum=0)
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", "3")
    if not env_bool("DATABASE_JIT", False):
        # Every statement of the service is short and planned in a millisecond, but the planner's
        # estimate for the recursive link walk crosses jit_above_cost once identifiers have a few
        # links each, and compiling it took 0.6 s of database CPU per request (docs/explanation/following-links.md).
        # A startup option: no round trip. Behind a pooler that refuses it, the role carries it.
        options = DATABASES["default"]["OPTIONS"].get("options", "")
        DATABASES["default"]["OPTIONS"]["options"] = f"{options} -c jit=off".strip()
    if DATABASE_REQUEST_TIMEOUTS:
        # Startup options: no round trip. Sent only when set: a pooler such as PgBouncer refuses
        # them, and there the role carries the timeouts.
        timeouts = [
            f"-c {name}={milliseconds}"
            for name, milliseconds in (
                ("statement_timeout", DATABASE_STATEMENT_TIMEOUT_MS),
                ("lock_timeout", DATABASE_LOCK_TIMEOUT_MS),
            )
            if milliseconds
        ]
        options = DATABASES["default"]["OPTIONS"].get("options", "")
        DATABASES["default"]["OPTIONS"]["options"] = " ".join([options, *timeouts]).strip()
    if DATABASE_PREPARED_STATEMENTS:
        # Django turns psycopg's prepared statements off; only the hot path's cursor asks for them,
        # every other query binds its parameters on the client and is never prepared.
        DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 5)
else:
    VAR_DIR.mkdir(exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        # Writers queue for the lock instead of failing with "database is locked".
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

SECRET_KEY = secret_key(
    "SECRET_KEY",
    key_file=VAR_DIR / "secret_key",
    may_generate=DEBUG or DATABASE_URL == DEFAULT_DATABASE_URL,
)

ASSIGNMENT_MAX_SUBJECTS = env_int("ASSIGNMENT_MAX_SUBJECTS", 1000, minimum=1, maximum=100_000)
# How long a process trusts a token it verified; a revocation made elsewhere takes effect within this time.
API_TOKEN_CACHE_SECONDS = env_int("API_TOKEN_CACHE_SECONDS", 5, minimum=0, maximum=3600)
# How long the change feed keeps a change (GET /changes, export_changes); prune_changes drops older ones.
CHANGES_RETENTION_DAYS = env_int("CHANGES_RETENTION_DAYS", 30, minimum=0, maximum=36_500)
# The web origins whose pages may call the OpenFeature evaluation paths from a browser (CORS, core/edge/ofrep.py).
OFREP_CORS_ALLOWED_ORIGINS = env_origins("OFREP_CORS_ALLOWED_ORIGINS")

# GET /metrics and the counting behind it (docs/reference/metrics-and-logs.md); off, nothing is counted and
# /metrics is 404.
METRICS_ENABLED = env_bool("METRICS_ENABLED", True)
# json: one JSON object per line, for the server's log collector; text: for a person (scripts/run-demo on a terminal).
LOG_FORMAT = env_choice("LOG_FORMAT", "json", ("json", "text"))

# Transport security (docs/how-to/deploy.md). Django sends HSTS only on HTTPS responses. The redirect
# never reaches /healthz, which the edge answers before the security middleware (core/edge), so
# plain-HTTP health checks keep working.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
# No SECURE_PROXY_SSL_HEADER: Django would take X-Forwarded-Proto from any peer that reaches gunicorn.
# gunicorn decides the scheme, believing the header only from the proxy (TRUST_X_FORWARDED_PROTO,
# deploy/gunicorn.conf.py).

INSTALLED_APPS = [
    # Before django.contrib.auth, so that its createsuperuser is the one manage.py runs.
    "staff",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "assignments",
    "idlinks",
    "tokens",
    "axes",
]

# Every request but those to the hot endpoints' paths, which the edge answers (core/edge/middleware.py says
# what it does for each entry here, and a test fails on an entry it does not account for).
MIDDLEWARE = [
    # Before everything: the request's ID, its log line and its metrics (docs/reference/metrics-and-logs.md).
    "core.middleware.requestid.RequestIdMiddleware",
    "core.middleware.requestlog.RequestLogMiddleware",
    "core.observability.requestmetrics.RequestMetricsMiddleware",
    # Wraps everything below, so a database failure anywhere becomes 503, not a 500 page.
    "core.middleware.guards.DatabaseUnavailableMiddleware",
    "core.middleware.guards.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's and /api/docs' assets from the installed packages: no CDN, no collectstatic.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.guards.ConnectionCheckMiddleware",
    # Sessions, users and messages are the staff console's: API requests pass them by
    # (core.middleware.staffonly.staff_only). CSRF and framing stay as they are, for every
    # request: a header check each, and `manage.py check --deploy` looks for them.
    "core.middleware.staffonly.StaffOnlySessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "core.middleware.staffonly.StaffOnlyAuthenticationMiddleware",
    "core.middleware.staffonly.StaffOnlyMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as axes asks: turns a refused sign-in into the lockout page. On any other request it
    # reads one attribute and does no I/O, so it is not worth a staff_only wrapper (which axes'
    # system check would not recognise).
    "axes.middleware.AxesMiddleware",
]

# Staff accounts (docs/how-to/staff-accounts.md). Django's four password rules, 12 characters at least:
# these accounts can change every experiment and mint API tokens.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# axes first: it refuses a locked-out sign-in before the password is even checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed sign-ins lock out a username from one client address: a guesser is stopped, and a stranger
# elsewhere who types a staff member's username cannot lock them out of their own address.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_RESET_ON_SUCCESS = True
# The client is the TCP peer: the admin is reached on gunicorn directly or through a tunnel, never
# through the proxy, so no forwarded-for header is believed (any caller could write one).
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]
AXES_LOCKOUT_CALLABLE = "staff.lockout.lockout_response"
# A refused staff form says why (Django's own page gives the reason only with DEBUG on).
CSRF_FAILURE_VIEW = "staff.csrf.csrf_failure"
# No banner at every process start; failures and lockouts are still logged.
AXES_VERBOSE = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
# Paths answer with or without a trailing slash by their own patterns, never by redirect.
APPEND_SLASH = False

# Bodies over 1 MiB are refused with 413 (docs/reference/api.md).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The admin templates every app's pages share (core/templates/admin/).
        "DIRS": [BASE_DIR / "core" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# WhiteNoise serves static files straight from the installed apps (finders), so there is no
# STATIC_ROOT and no collectstatic step; the admin and /api/docs work from a fresh checkout.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tokens.authentication.ApiTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tokens.authentication.IsAdminRole"],
    "DEFAULT_PARSER_CLASSES": ["core.api.parsers.JsonParser"],
    "DEFAULT_RENDERER_CLASSES": ["core.api.renderers.JsonRenderer"],
    "EXCEPTION_HANDLER": "core.api.exceptions.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Experiment assignment service",
    "DESCRIPTION": "Assigns subjects to experiment variants deterministically and stores each assignment, "
    "so a subject keeps its variant; links identifiers of one subject so that an assignment can follow the "
    "links. Calls need an API token in `Authorization: Bearer <token>` or `Authentication`; errors are "
    "application/problem+json.",
    "VERSION": VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/schema and /api/docs are public: a bad token there is ignored.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No call to the public swagger.io validator: the page works without internet access.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ProblemCode": "core.api.schema.PROBLEM_CODES",
        "ExperimentStatus": "assignments.openapi.EXPERIMENT_STATUSES",
    },
    "POSTPROCESSING_HOOKS": [
        "assignments.openapi.postprocess_schema",
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema.postprocess_schema",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "core.observability.logformats.JsonFormatter"},
        "text": {"()": "core.observability.logformats.TextFormatter"},
    },
    "filters": {
        # A failure repeated by every request (a database outage) is one line and a count
        # (core/observability/logfilters.py).
        "repeats": {"()": "core.observability.logfilters.RepeatSummaryFilter"},
        "no_503": {"()": "core.observability.logfilters.ServiceUnavailableFilter"},
        "request_id": {"()": "core.observability.logfilters.RequestIdFilter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["repeats", "request_id"]},
        # The line per request (core/middleware/requestlog.py): never summarised, every request has its own.
        "requests": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "django.request": {"filters": ["no_503"]},
        "config.requestlog": {"handlers": ["requests"], "level": "INFO", "propagate": False},
    },
}
