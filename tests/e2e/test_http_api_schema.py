"""Schemathesis against the live HTTP API: `claudeq api` as its own process over a real fleet (real Redis, a real
worker, the real CLI and the simulator behind it). Every operation of the OpenAPI document is called with values
generated from the document itself — as the operator, as a tenant, and with no token — and every answer must be no
server error and exactly what the document says (status, content type, body schema, headers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from schemathesis.checks import positive_data_acceptance

from claudeq.config.settings import Settings
from tests.e2e.conftest import WorkerFactory
from tests.support.web_proc import Served, serve_command

pytestmark = pytest.mark.e2e

TOKENS = {"CQT_API_SCHEMA_A": "schema-token-of-team-a-7d2e"}
OPERATOR = "schema-operator-token-0c3b"
#: Examples per operation and caller: bounded so the whole run takes a minute or two on a shared machine.
EXAMPLES = 30


@pytest.fixture
def fleet(settings: Settings, tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('allow_unknown = true\n\n[[tenants]]\nname = "team-a"\nmcp_token_env = "CQT_API_SCHEMA_A"\n')
    return settings.model_copy(update={"tenants_file": tenants, "web_token": SecretStr(OPERATOR)})


@pytest.fixture
def api(fleet: Settings, tmp_path: Path) -> Iterator[Served]:
    with serve_command("api", fleet, tmp_path, TOKENS) as served:
        yield served


def test_every_operation_answers_as_its_openapi_document_says(api: Served, workers: WorkerFactory) -> None:
    workers(concurrency=2)
    schema = schemathesis.openapi.from_url(f"{api.base}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    callers = {
        "operator": {"Authorization": f"Bearer {OPERATOR}"},
        "tenant": {"Authorization": f"Bearer {TOKENS['CQT_API_SCHEMA_A']}"},
        "anonymous": {},
    }
    # Real jobs, so the operations on one meet a job as well as ids that name none: one run to its end, one
    # waiting on it, one of team-a's.
    made = []
    for who, spec in (
        ("operator", {"prompt": "[[sim: text done]] first"}),
        ("tenant", {"prompt": "[[sim: text done]] team-a's"}),
    ):
        answer = httpx.post(f"{api.base}/api/v1/jobs", json=spec, headers=callers[who])
        assert answer.status_code == 201, answer.text
        made.append(answer.json()["id"])
    follows = {"prompt": "[[sim: text later]] then", "depends_on": [made[0]]}
    made.append(httpx.post(f"{api.base}/api/v1/jobs", json=follows, headers=callers["operator"]).json()["id"])
    seen: dict[str, set[int]] = {}
    for operation in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            case=operation.as_strategy(),
            who=st.sampled_from(sorted(callers)),
            job=st.none() | st.sampled_from(made),
        )
        def call(case: schemathesis.Case, who: str, job: str | None) -> None:
            if job is not None and case.path_parameters and "job_id" in case.path_parameters:
                case.path_parameters["job_id"] = job
            # A spec the document allows may still be refused by the fleet's policy (a cwd outside the workspace
            # roots, an unknown tool profile): that is the typed 422 the document gives, not a schema violation.
            case.headers = {**(case.headers or {}), **callers[who]}  # on the case: the auth check takes it off
            response = case.call_and_validate(
                base_url=f"{api.base}/api/v1", excluded_checks=[positive_data_acceptance], timeout=30
            )
            seen.setdefault(case.operation.label, set()).add(response.status_code)

        call()
    assert not [label for label, codes in seen.items() if any(code >= 500 and code != 503 for code in codes)]
    assert not [label for label, codes in seen.items() if 503 in codes], seen  # Redis answers here
    assert 201 in seen["POST /jobs"] and 422 in seen["POST /jobs"], seen["POST /jobs"]
    assert {200, 404} <= seen["GET /jobs/{job_id}"] and {200, 404} <= seen["GET /jobs/{job_id}/events"], seen
