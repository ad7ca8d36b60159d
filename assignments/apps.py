from django.apps import AppConfig


class AssignmentsConfig(AppConfig):
    name = "assignments"

    def ready(self) -> None:
        # The staff pages live in the console wing, where admin.autodiscover() does not look.
        from assignments.console import admin  # noqa: F401
