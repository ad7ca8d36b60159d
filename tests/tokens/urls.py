"""Test-only routes: the service's own, plus an admin-only endpoint to show 403 on.

The API has no admin-only endpoint yet (/api/schema and /api/docs are public),
so the role check is exercised on this view, which takes the default permission.
"""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as service_urlpatterns


class AdminOnlyApi(APIView):
    def get(self, request):
        return Response({"token": request.auth.name})


urlpatterns = [*service_urlpatterns, path("test-admin-only", AdminOnlyApi.as_view())]
handler404 = "core.api.error_views.not_found"
