from django.contrib import admin
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from assignments.api import AssignmentsApi, ExperimentAssignmentsApi, IdLinkApi
from assignments.data.changes_api import ChangesApi
from assignments.ofrep import OfrepFlagApi, OfrepFlagsApi
from core.observability.exposition import MetricsApi

# The token-authenticated endpoints, by path.
API_VIEWS = {
    "experiment-assignments": ExperimentAssignmentsApi,
    "assignments": AssignmentsApi,
    "id-link": IdLinkApi,
    "metrics": MetricsApi,
    "changes": ChangesApi,
}

# OpenFeature's evaluations, by route name: the bulk one at OFREP_BULK, the single one below OFREP_FLAG_PREFIX,
# where the rest of the path (a trailing slash aside) is the flag's key; an empty key is the bulk path.
OFREP_BULK = "ofrep/v1/evaluate/flags"
OFREP_FLAG_PREFIX = f"{OFREP_BULK}/"
OFREP_VIEWS = {"ofrep-evaluate-flags": OfrepFlagsApi, "ofrep-evaluate-flag": OfrepFlagApi}

# Answered by the edge (core/edge, config/wsgi.py), with /healthz and OpenFeature's paths: the hot endpoints.
# Their routes here give the API's schema its operations.
EDGE_ROUTES = ("experiment-assignments", "assignments", "id-link")

# Every API path answers with or without a trailing slash, by pattern, never by redirect.
urlpatterns = [
    *(re_path(rf"^{path}/?$", view.as_view(), name=path) for path, view in API_VIEWS.items()),
    re_path(rf"^{OFREP_BULK}/?$", OfrepFlagsApi.as_view(), name="ofrep-evaluate-flags"),
    re_path(rf"^{OFREP_FLAG_PREFIX}(?P<key>[^/]+)/?$", OfrepFlagApi.as_view(), name="ofrep-evaluate-flag"),
    # /healthz has no route: the edge answers it (core/healthz.py).
    path("admin/", admin.site.urls),
    re_path(r"^api/schema/?$", SpectacularAPIView.as_view(), name="api-schema"),
    re_path(r"^api/docs/?$", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

handler404 = "core.api.error_views.not_found"
handler500 = "core.api.error_views.server_error"
handler400 = "core.api.error_views.bad_request"
handler403 = "core.api.error_views.permission_denied"
