from django.db import migrations


def create_default_lab(apps, schema_editor):
    Lab = apps.get_model("assignments", "Lab")
    if not Lab.objects.filter(key__iexact="default").exists():
        Lab.objects.create(key="default", name="default")


class Migration(migrations.Migration):
    dependencies = [("assignments", "0001_initial")]

    operations = [migrations.RunPython(create_default_lab, migrations.RunPython.noop)]
