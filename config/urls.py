from django.contrib import admin
from django.urls import path, re_path

from assignments.api import ExperimentAssignmentsApi

# Every API path answers with or without a trailing slash, by pattern, never by redirect.
urlpatterns = [
    re_path(r"^experiment-assignments/?$", ExperimentAssignmentsApi.as_view(), name="experiment-assignments"),
    path("admin/", admin.site.urls),
]

handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
handler400 = "config.views.bad_request"
handler403 = "config.views.permission_denied"
