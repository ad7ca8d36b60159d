"""The layer pages: the layer's fields, and its 10,000 slots drawn with who owns them now and who did before.

Slots are edited on the experiments' pages (each run of slots links to its owner's):
an experiment's spec.layer is part of its document, so the experiment's apply checks
them, overlaps included, as YAML does.
"""

from __future__ import annotations

from django.contrib import admin

from assignments.console.admin.resources import ResourceAdmin
from assignments.console.charts import slots_bar
from assignments.console.forms.layers import LayerForm
from assignments.console.slotmaps import layer_slot_map
from assignments.models import Layer
from assignments.slots import SLOTS


@admin.register(Layer)
class LayerAdmin(ResourceAdmin):
    kind = "layer"
    form = LayerForm
    fields = ["key", "name", "description", "subject_type", "salt", "resource_version"]
    list_display = ["key", "name", "subject_type", "salt", "resource_version", "updated_at"]
    list_filter = ["subject_type"]
    list_select_related = ["subject_type"]
    search_fields = ["key", "name"]

    def has_delete_permission(self, request, obj=None) -> bool:
        # Not only because no YAML deletes configuration: the hot path knows its cached states are current
        # from a sum of resource versions over experiments and layers (selectors.experiment_catalog_version),
        # which only grows while none is ever deleted.
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("subject_type")

    def page_context(self, obj: Layer) -> dict:
        """The history, and the slots: a bar, its legend and the same facts as tables."""
        slot_map = layer_slot_map(obj)
        return {
            **super().page_context(obj),
            "slot_map": slot_map,
            "slot_bar": slots_bar(slot_map, title=f"The {SLOTS:,} slots of layer {obj.key}"),
            "slots_total": SLOTS,
        }
