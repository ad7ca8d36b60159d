from django.contrib import admin
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from assignments.api import AssignmentsApi, ExperimentAssignmentsApi, IdLinkApi
from assignments.data.changes_api import ChangesApi
from core.observability.exposition import MetricsApi

# The token-authenticated endpoints, by path.
API_VIEWS = {
    "experiment-assignments": ExperimentAssignmentsApi,
    "assignments": AssignmentsApi,
    "id-link": IdLinkApi,
    "metrics": MetricsApi,
    "changes": ChangesApi,
}

# Answered by the edge (core/edge, config/wsgi.py), with /healthz: the hot endpoints. Their routes here give the
# API's schema its operations.
EDGE_ROUTES = ("experiment-assignments", "assignments", "id-link")

# Every API path answers with or without a trailing slash, by pattern, never by redirect.
urlpatterns = [
    *(re_path(rf"^{path}/?$", view.as_view(), name=path) for path, view in API_VIEWS.items()),
    # /healthz has no route: the edge answers it (core/healthz.py).
    path("admin/", admin.site.urls),
    re_path(r"^api/schema/?$", SpectacularAPIView.as_view(), name="api-schema"),
    re_path(r"^api/docs/?$", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

handler404 = "core.api.error_views.not_found"
handler500 = "core.api.error_views.server_error"
handler400 = "core.api.error_views.bad_request"
handler403 = "core.api.error_views.permission_denied"
