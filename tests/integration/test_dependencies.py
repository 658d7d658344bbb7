"""Dependent jobs at submit and at their dependencies' ends, on a real Redis without workers: what is refused and
why, the `waiting` status (no broker message, counted), and the release a dependency's end makes."""

from __future__ import annotations

import pytest
import redis

from claudeq.errors import BatchSpecError, JobSpecError
from claudeq.jobs import status_counts
from claudeq.producer.client import Client

pytestmark = pytest.mark.integration


def refused(client: Client, **spec: object) -> tuple[str, str]:
    with pytest.raises(JobSpecError) as caught:
        client.submit(**spec)
    [problem] = caught.value.errors
    return problem


def test_what_a_dependent_job_may_name_is_checked_at_submit(client: Client, unique: str) -> None:
    field, reason = refused(client, prompt="p", depends_on=["0000000000000000nosuchjob"])
    assert field == "depends_on" and "no such job" in reason
    theirs = client.submit(prompt=f"b's {unique}", tenant="team-b")
    field, reason = refused(client, prompt="p", depends_on=[theirs.id])  # another tenant's job is as if missing
    assert field == "depends_on" and "no such job" in reason
    gone = client.submit(prompt=f"gone {unique}")
    client.cancel(gone.id)
    field, reason = refused(client, prompt="p", depends_on=[gone.id])
    assert field == "depends_on" and "cancelled" in reason
    anyway = client.submit(prompt="p", depends_on=[gone.id], on_dependency_failure="run")
    assert client.get(anyway.id).status == "queued"  # nothing left to wait for
    field, reason = refused(client, prompt="use {{dep[1].text}}", depends_on=[anyway.id])
    assert field == "prompt" and "dep[1]" in reason
    field, _ = refused(client, prompt="p", depends_on=[anyway.id, anyway.id])
    assert field == "depends_on"
    with pytest.raises(BatchSpecError) as caught:
        client.submit_many([{"prompt": "a"}, {"prompt": "b", "depends_on": [anyway.id]}])
    assert [(i, f) for i, f, _ in caught.value.items] == [(1, "depends_on")]


def test_a_waiting_job_has_no_message_and_its_dependencies_end_releases_it(
    client: Client, redis_client: redis.Redis, unique: str
) -> None:
    keys = client.store.keys
    root = client.submit(prompt=f"root {unique}")
    other = client.submit(prompt=f"other {unique}")
    both = client.submit(prompt=f"both {unique}", depends_on=[root.id, other.id])
    doomed = client.submit(prompt=f"doomed {unique}", depends_on=[root.id])
    assert client.get(both.id).status == "waiting"
    messages = [m.decode() for m in redis_client.lrange(client.settings.queue, 0, -1)]
    assert not any(both.id in m or doomed.id in m for m in messages)  # no broker message while it waits
    assert status_counts(redis_client, keys, 0)["waiting"] == 2
    assert redis_client.smembers(keys.dependents(root.id)) == {both.id.encode(), doomed.id.encode()}

    client.cancel(root.id)  # one dependency's end: `doomed` may not run now, `both` still waits for `other`
    assert client.get(doomed.id).status == "deferred" and redis_client.zscore(keys.deferred, doomed.id) is not None
    assert client.get(both.id).status == "deferred"  # a failed dependency dooms it too: due, to be failed
    assert not redis_client.exists(keys.dependents(root.id))
    assert status_counts(redis_client, keys, 0)["waiting"] == 0


def test_a_cancelled_waiting_job_releases_its_own_dependents(client: Client, unique: str) -> None:
    root = client.submit(prompt=f"root {unique}")
    middle = client.submit(prompt=f"middle {unique}", depends_on=[root.id])
    last = client.submit(prompt=f"last {unique}", depends_on=[middle.id], on_dependency_failure="run")
    assert client.cancel(middle.id) == "cancelled"
    assert client.get(last.id).status == "deferred"  # its one dependency ended: it may run ("run")
    assert client.get(root.id).status == "queued"
