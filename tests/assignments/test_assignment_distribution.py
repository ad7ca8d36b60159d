"""20,000 new subjects land in the variants as configured, each exactly where the assignment formula puts it."""

from __future__ import annotations

import math
from collections import Counter

from assignments.assigning import assign_subjects
from assignments.models import Assignment
from tests.helpers import resources
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources

SPLITS = [("control", 0.2), ("b", 0.3), ("c", 0.5)]
SUBJECTS = 20_000
# Chi-square with 2 degrees of freedom exceeds 27.63 with probability 1e-6 under the right formula;
# a formula that swapped, dropped or mis-accumulated the splits scores in the thousands.
CHI_SQUARE_LIMIT = -2 * math.log(1e-6)

CONFIG = (
    resources.subject_type("user"),
    resources.experiment(
        "three-way",
        salt="distribution-test",
        variants=[
            resources.variant("control", 0.2, control=True),
            resources.variant("b", 0.3),
            resources.variant("c", 0.5),
        ],
    ),
)


def test_assign__20000_new_subjects__split_as_configured_and_equal_to_the_formula(db):
    apply_resources(*CONFIG)
    subject_ids = [f"user-{index:05d}" for index in range(SUBJECTS)]

    answered: dict[str, str] = {}
    for start in range(0, SUBJECTS, 1000):
        answered.update(
            assign_subjects(experiment_id="three-way", subject_ids=subject_ids[start : start + 1000]).assignments
        )

    # Each subject is where the independent computation of the formula puts it, in the answer and in the table
    expected = {subject_id: reference_variant("distribution-test", subject_id, SPLITS) for subject_id in subject_ids}
    assert answered == expected
    stored = dict(Assignment.objects.values_list("subject_id", "variant__key"))
    assert stored == expected
    # And the observed split matches the configured one
    counts = Counter(answered.values())
    chi_square = sum((counts[variant] - SUBJECTS * split) ** 2 / (SUBJECTS * split) for variant, split in SPLITS)
    assert chi_square < CHI_SQUARE_LIMIT, (counts, chi_square)
    for variant, split in SPLITS:
        sigma = math.sqrt(SUBJECTS * split * (1 - split))
        assert abs(counts[variant] - SUBJECTS * split) < 5 * sigma, counts
