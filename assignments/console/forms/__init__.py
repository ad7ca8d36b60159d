"""The admin's forms for configuration resources, one module per resource (resources.py holds their common
ground and the subject type's and lab's): a form is a resource document, applied by the one service.

A form holds declared fields only (Meta.exclude names every model field), so Django
never writes them into the model instance or validates the model itself. Instead the cleaned
data becomes the same document a YAML file holds, which goes through
resources.resource_read and configuration/apply.resources_apply, exactly as
apply_resources does; each ResourceProblem comes back as an error on the field
its path names. The apply runs inside the admin's own transaction (changeform_view
is atomic), so a save is one transaction from validation to history entry.

The gates' fields are edited as staff can get right at 2 a.m.:

- a subject type's declared attributes are rows of a name and a type picked from a
  list (a type cannot be misspelt), with a Remove box like the variants' (a row
  cleared by mistake does not silently drop an attribute);
- an experiment's targeting is the YAML of spec.targeting in a text area: conditions
  nest (anyOf) and hold lists, which rows of inputs would make slow and error-prone,
  and it is the text staff already read in files, the export and the history. The
  field's help lists the subject type's attributes and the operators each allows,
  and every refusal names the condition it is about;
- times are ISO 8601 text with an offset, shown in UTC, as the export writes them;
- the holdouts covering an experiment are ticked in a list of every holdout (an ID
  cannot be misspelt), its layer picked from a list, and its slots are the YAML of
  spec.layer.slots, the ranges as the export and the history show them; what an
  experiment's assignments fix (its holdouts, its layer) is shown but not offered;
- lowering the coverage of an experiment that is active or later is refused until
  staff tick a confirmation that appears beside it: it is the one edit of the gates
  that keeps out subjects who would have entered, and a message after the save would
  come once it is done.

TrySubjectForm is the experiment page's "try a subject": a subject ID and attributes
typed as the subject type declares them, checked as the API checks them.
"""
