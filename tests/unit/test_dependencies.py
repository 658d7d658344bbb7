"""Dependencies decide and fill in: placeholders resolved from the dependencies' records, only the job's own
tenant's."""

from __future__ import annotations

from claudeq.dependencies import settle
from claudeq.models import JobRecord, JobResult, JobSpec, utcnow


def test_a_dependencys_result_fills_the_prompt_only_for_its_own_tenant() -> None:
    def done(job_id: str, tenant: str, text: str) -> JobRecord:
        spec = JobSpec(prompt="p", tenant=tenant)
        result = JobResult(text=text, structured_output={"labels": ["bug", "ui"]})
        return JobRecord(id=job_id, spec=spec, status="succeeded", result=result, created_at=utcnow())

    spec = JobSpec(prompt="{{dep[0].text}} / {{dep[0].structured.labels.1}} / {{dep[0].id}}", depends_on=["a"])
    assert settle(spec, [done("a", "default", "hello")]) == "hello / ui / a"
    foreign = settle(spec, [done("a", "team-b", "secret of b")])
    assert not isinstance(foreign, str) and foreign.kind == "dependency" and "secret" not in foreign.message
