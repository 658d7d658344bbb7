"""The HTTP API `/api/v1` (docs/http-api.md) on a real Redis, through `claudeq web`'s ASGI app: tenants' tokens are
isolated on every endpoint, refusals are the Python client's own, and every error is the typed answer the OpenAPI
document gives. A live fleet behind it: tests/e2e/test_http_api.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr
from starlette.testclient import TestClient

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobSpec
from claudeq.producer.client import Client
from claudeq.producer.web import create_app
from tests.conftest import make_settings

pytestmark = pytest.mark.integration

TOKENS = {"CQT_API_TOKEN_A": "api-token-of-team-a-81f0", "CQT_API_TOKEN_B": "api-token-of-team-b-2c4d"}
OPERATOR = "api-operator-token-5e9a"
AS_A = {"authorization": f"Bearer {TOKENS['CQT_API_TOKEN_A']}"}
AS_B = {"authorization": f"Bearer {TOKENS['CQT_API_TOKEN_B']}"}
AS_OPERATOR = {"authorization": f"Bearer {OPERATOR}"}


@pytest.fixture
def fleet(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Two tenants with tokens (team-b may submit 3 jobs a minute through the API) and the operator's token."""
    for name, value in TOKENS.items():
        monkeypatch.setenv(name, value)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "team-a"\nmcp_token_env = "CQT_API_TOKEN_A"\n\n'
        '[[tenants]]\nname = "team-b"\nmcp_token_env = "CQT_API_TOKEN_B"\nsubmit_per_minute = 3\n'
    )
    return settings.model_copy(update={"tenants_file": tenants, "web_token": SecretStr(OPERATOR)})


@pytest.fixture
def fleet_client(fleet: Settings, redis_client: redis.Redis) -> Client:
    return Client(fleet, redis_client=redis_client)


@pytest.fixture
def http(fleet: Settings, fleet_client: Client) -> Iterator[TestClient]:
    with TestClient(create_app(fleet, fleet_client), base_url="http://127.0.0.1:8780/api/v1") as client:
        yield client


def test_another_tenants_job_is_404_on_every_endpoint(http: TestClient, fleet_client: Client, unique: str) -> None:
    theirs = http.post("/jobs", json={"prompt": f"team-a's {unique}"}, headers=AS_A)
    assert theirs.status_code == 201 and theirs.json()["created"] is True
    job_id = theirs.json()["id"]
    assert fleet_client.get(job_id).spec.tenant == "team-a"  # a tenant's token submits as its tenant
    never = "0" * 26
    answers = {}
    for name, job in (("theirs", job_id), ("never", never)):
        answers[name] = [
            http.get(f"/jobs/{job}", headers=AS_B),
            http.get(f"/jobs/{job}/events", headers=AS_B),
            http.get(f"/jobs/{job}/events", headers={**AS_B, "accept": "text/event-stream"}),
            http.get(f"/jobs/{job}/transcript", headers=AS_B),
            http.post(f"/jobs/{job}/cancel", headers=AS_B),
        ]
    for theirs_answer, never_answer in zip(answers["theirs"], answers["never"], strict=True):
        assert theirs_answer.status_code == 404 == never_answer.status_code, theirs_answer.url
        # Word for word what a job that never existed answers, but for its id: nothing says it exists.
        assert theirs_answer.json()["detail"].replace(job_id, never) == never_answer.json()["detail"]
    assert fleet_client.get(job_id).status == "queued"
    listed = http.get("/jobs", params={"tenant": "team-a"}, headers=AS_B).json()
    assert listed["jobs"] == []  # a tenant's list is its own, whatever it asks
    assert [j["id"] for j in http.get("/jobs", headers=AS_A).json()["jobs"]] == [job_id]
    assert http.get(f"/jobs/{job_id}", headers=AS_A).json()["spec"]["prompt"] == f"team-a's {unique}"
    # Acting for the other tenant is refused, and the operator's pages are the operator's.
    assert http.post("/jobs", json={"prompt": "x", "tenant": "team-a"}, headers=AS_B).status_code == 403
    assert (
        http.post("/jobs:batch", json={"jobs": [{"prompt": "x", "tenant": "team-a"}]}, headers=AS_B).status_code == 403
    )
    assert http.get("/schedules", params={"tenant": "team-a"}, headers=AS_B).status_code == 403
    assert http.get("/accounts", headers=AS_B).status_code == 403
    assert http.get("/tenants", headers=AS_B).status_code == 403
    assert len(fleet_client.list(tenant="team-a")) == 1
    # The operator sees every tenant's.
    assert http.get(f"/jobs/{job_id}", headers=AS_OPERATOR).status_code == 200
    assert http.get("/tenants", headers=AS_OPERATOR).status_code == 200


def test_a_refusal_is_the_python_clients_own(http: TestClient, fleet_client: Client) -> None:
    spec = {"prompt": "  ", "max_turns": 0, "max_turn": 3, "cwd": "relative/path"}
    answer = http.post("/jobs", json=spec, headers=AS_OPERATOR)
    with pytest.raises(JobSpecError) as refused:
        fleet_client.validate(spec)
    assert answer.status_code == 422
    assert [(e["field"], e["reason"]) for e in answer.json()["errors"]] == refused.value.errors
    batch = http.post("/jobs:batch", json={"jobs": [{"prompt": "fine"}, spec]}, headers=AS_OPERATOR)
    assert batch.status_code == 422 and {e["field"] for e in batch.json()["errors"]} >= {
        "[1].max_turns",
        "[1].max_turn",
    }
    assert fleet_client.list() == []  # nothing of a refused batch is written
    huge = b'{"prompt": "' + b"x" * (33 * 2**20) + b'"}'
    for body, field in ((b"not json", "body"), (b"[1, 2]", "spec"), (huge, "body")):
        bad = http.post("/jobs", content=body, headers={**AS_OPERATOR, "content-type": "application/json"})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == field, body[:20]
    listed = http.get("/jobs", params={"status": "finished", "since": "yesterday"}, headers=AS_OPERATOR)
    assert listed.status_code == 422 and [e["field"] for e in listed.json()["errors"]] == ["status", "since"]


def test_without_a_known_token_every_call_is_401(http: TestClient, fleet_client: Client) -> None:
    job = fleet_client.submit(prompt="kept", tenant="team-a")
    for headers in ({}, {"authorization": "Bearer not-a-token"}, {"authorization": f"Basic {OPERATOR}"}):
        for answer in (
            http.post("/jobs", json={"prompt": "x"}, headers=headers),
            http.get("/jobs", headers=headers),
            http.get(f"/jobs/{job.id}", headers=headers),
            http.post(f"/jobs/{job.id}/cancel", headers=headers),
            http.get("/schedules", headers=headers),
        ):
            assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer", answer.url
    assert http.get("/healthz").json() == {"status": "ok"}  # health needs no token
    assert fleet_client.get(job.id).status == "queued" and len(fleet_client.list()) == 1


def test_an_idempotency_key_answers_the_same_job_and_refuses_another_spec(http: TestClient) -> None:
    key = {"idempotency-key": "order-1234", **AS_A}
    first = http.post("/jobs", json={"prompt": "summarise order 1234"}, headers=key)
    again = http.post("/jobs", json={"prompt": "summarise order 1234"}, headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and again.json()["created"] is False
    assert again.headers["location"] == f"/api/v1/jobs/{first.json()['id']}"
    other = http.post("/jobs", json={"prompt": "something else"}, headers=key)
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    # Another tenant's same key is another job (keys are each tenant's own).
    theirs = http.post("/jobs", json={"prompt": "summarise order 1234"}, headers={**key, **AS_B})
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    mixed = http.post("/jobs", json={"prompt": "p", "idempotency_key": "other"}, headers=key)
    assert mixed.status_code == 422 and mixed.json()["errors"][0]["field"] == "idempotency_key"


def test_a_tenant_over_its_submit_rate_is_answered_429(http: TestClient, fleet_client: Client) -> None:
    for n in range(3):
        assert http.post("/jobs", json={"prompt": f"b {n}"}, headers=AS_B).status_code == 201
    over = http.post("/jobs", json={"prompt": "b 3"}, headers=AS_B)
    assert over.status_code == 429 and 1 <= int(over.headers["retry-after"]) <= 61
    assert http.post("/jobs:batch", json={"jobs": [{"prompt": "b 4"}]}, headers=AS_B).status_code == 429
    assert len(fleet_client.list(tenant="team-b")) == 3
    # Another tenant's limit is its own (team-a has none).
    assert (
        http.post("/jobs:batch", json={"jobs": [{"prompt": f"a {n}"} for n in range(5)]}, headers=AS_A).status_code
        == 201
    )


def test_schedules_are_added_listed_and_removed_in_the_callers_tenant(http: TestClient, fleet_client: Client) -> None:
    added = http.post(
        "/schedules", json={"name": "nightly", "spec": {"prompt": "tidy up"}, "cron": "0 3 * * *"}, headers=AS_A
    )
    assert added.status_code == 201 and added.json()["spec"]["tenant"] == "team-a"
    refused = http.post("/schedules", json={"name": "bad", "spec": {"prompt": "x"}, "cron": "61 3 * * *"}, headers=AS_A)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "cron"
    assert [s["schedule"]["name"] for s in http.get("/schedules", headers=AS_A).json()["schedules"]] == ["nightly"]
    assert http.get("/schedules", headers=AS_B).json()["schedules"] == []
    assert http.delete("/schedules/nightly", headers=AS_B).status_code == 404  # team-b has no such schedule
    assert http.delete("/schedules/nightly", headers=AS_A).status_code == 204
    assert fleet_client.schedules() == []


def test_an_unreachable_redis_is_503(unique: str) -> None:
    down = make_settings("redis://127.0.0.1:1/0", unique, web_token=SecretStr(OPERATOR))
    app = create_app(down, Client(down))
    with TestClient(app, base_url="http://127.0.0.1:8780/api/v1") as http:
        for answer in (
            http.get("/healthz"),
            http.get("/jobs", headers=AS_OPERATOR),
            http.post("/jobs", json={"prompt": "x"}, headers=AS_OPERATOR),
        ):
            assert answer.status_code == 503 and "Redis" in answer.json()["detail"], answer.url


def test_the_openapi_document_gives_the_python_clients_job_spec_and_every_error_typed(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    given = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in given.pop("$defs").items():
        assert schemas[name] == sub, name
    assert schemas["JobSpec"] == given
    submit = document["paths"]["/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/JobSpec"}
    assert {"201", "200", "401", "403", "409", "422", "429", "503"} <= set(submit["responses"])
    refusal = submit["responses"]["422"]["content"]["application/json"]["schema"]
    assert refusal == {"$ref": "#/components/schemas/Refusal"}
    assert schemas["FieldProblem"]["required"] == ["field", "reason"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert "503" in operation["responses"], (method, path)
            if path.startswith("/jobs/{job_id}"):
                assert "404" in operation["responses"], (method, path)
