from django.apps import AppConfig


class IdlinksConfig(AppConfig):
    name = "idlinks"
    verbose_name = "Identifier links"
