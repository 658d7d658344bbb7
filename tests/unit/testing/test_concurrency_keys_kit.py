"""The testing kit runs concurrency-keyed jobs with the fleet's own key scripts (on fakeredis): they succeed and leave
no hold or line behind (docs/jobs.md#concurrency-keys). That they never overlap is the e2e's to show, with real runs
(tests/e2e/test_concurrency_keys.py)."""

from __future__ import annotations

from claudeq.testing import Fleet


def test_keyed_jobs_run_and_leave_no_hold_behind(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply(r"keyed", text="done")
    jobs = [claudeq_fleet.client.submit(prompt=f"keyed {n}", concurrency_key="repo:/srv/app") for n in range(4)]
    records = [job.wait() for job in jobs]
    assert [r.status for r in records] == ["succeeded"] * 4
    redis = claudeq_fleet.client.store.redis
    assert redis.keys(f"{claudeq_fleet.client.store.keys.prefix}ckey:*") == []
