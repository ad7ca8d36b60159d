"""The experiment `checkout-button` evaluated as an OpenFeature flag by the official Python SDK and its OFREP
provider (`pip install openfeature-sdk openfeature-provider-ofrep`):

    SERVICE_URL=http://localhost:8000 TOKEN=... python python_client.py u1

prints the evaluation's details as one JSON line; an error goes to stderr with exit status 1.
"""

import json
import os
import sys

from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext

token = os.environ["TOKEN"]
provider = OFREPProvider(
    os.environ.get("SERVICE_URL", "http://localhost:8000"),
    # Called before every request, so a token renewed meanwhile is the one sent.
    headers_factory=lambda: {"Authorization": f"Bearer {token}"},
)
# set_provider() readies the provider in a background thread: an evaluation that comes first gets
# PROVIDER_NOT_READY and the default value.
api.set_provider_and_wait(provider)
client = api.get_client()

subject_id = sys.argv[1] if len(sys.argv) > 1 else "u1"
# The default value is what the app shows when the service cannot answer: the control's.
details = client.get_string_details("checkout-button", "control", EvaluationContext(targeting_key=subject_id))
if details.error_code:
    # The SDK raises nothing: a failed evaluation answers the default value, with the error in its details.
    sys.exit(f"{details.error_code}: {details.error_message}")
print(
    json.dumps(
        {
            "value": details.value,
            "variant": details.variant,
            "reason": details.reason,
            "flag_metadata": dict(details.flag_metadata),
        }
    )
)
