"""Staff console: edit the configuration, run the lifecycle, watch each experiment, look up any subject.

Every edit goes through configuration/apply.resources_apply (see forms.py), the service
apply_resources uses, so the same rules hold and every change lands in the
resource's history. Assignments are immutable and the table grows without
bound: its lists are counted by estimate and searched by exact subject ID only,
always through the unique index on (experiment, subject_id).

One module per family of pages; importing them registers their ModelAdmins.
"""

from assignments.console.admin import assignments, experiments, history, holdouts, layers, resources  # noqa: F401
