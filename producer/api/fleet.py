"""The HTTP API's schedules and the operator's views of the fleet (docs/http-api.md#endpoints)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from claudeq.errors import ConfigError, JobSpecError
from claudeq.schedules import Schedule, ScheduleNotFound

from .core import ApiDep, ApiError, Caller, body_of, json_body, operator_only, problems, run
from .models import AccountList, Health, Problem, ScheduleIn, ScheduleList, TenantList

router = APIRouter()


@router.get("/schedules", response_model=ScheduleList, responses=problems(401, 403, 422))
async def list_schedules(api: ApiDep, viewer: Caller, tenant: str | None = None) -> ScheduleList:
    """The schedules (a tenant's token: its own), with their next tick and what they fired."""
    if viewer.tenant is not None:
        tenant = api.schedule_tenant(viewer, tenant)
    return ScheduleList(schedules=await run(api.client.schedules, tenant))


@router.post(
    "/schedules",
    status_code=201,
    response_model=Schedule,
    responses=problems(401, 403, 422),
    openapi_extra=body_of(ScheduleIn),
)
async def add_schedule(request: Request, api: ApiDep, viewer: Caller) -> Schedule:
    """Add a schedule: its spec is checked as a submit's is; a name in use is refused unless `replace`."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise JobSpecError([("body", "a JSON object (a schedule)")])
    unknown = sorted(set(body) - set(ScheduleIn.model_fields))
    if unknown:
        raise JobSpecError([(name, "unknown field") for name in unknown])
    rule = {k: v for k, v in body.items() if k not in ("name", "spec", "replace")}
    name, spec = body.get("name"), body.get("spec")
    if not isinstance(name, str) or not isinstance(spec, dict):
        raise JobSpecError([("name" if not isinstance(name, str) else "spec", "required")])
    spec = api.owned(viewer, {**spec, "tenant": api.schedule_tenant(viewer, spec.get("tenant"))})
    replace = body.get("replace", False) is True
    return await run(lambda: api.client.add_schedule(name, spec, replace=replace, **rule))


@router.delete("/schedules/{name}", status_code=204, responses=problems(401, 403, 404, 422))
async def remove_schedule(name: str, api: ApiDep, viewer: Caller, tenant: str | None = None) -> Response:
    """Remove a schedule (the jobs it fired stay)."""
    owner = api.schedule_tenant(viewer, tenant)
    try:
        await run(api.client.remove_schedule, name, owner)
    except ScheduleNotFound:
        raise ApiError(404, f"no schedule {name!r}") from None
    return Response(status_code=204)


# -- the operator's


@router.get("/accounts", response_model=AccountList, responses=problems(401, 403))
async def accounts(api: ApiDep, viewer: Caller) -> AccountList:
    """The fleet's accounts: state, slots in use, cooldowns, windows (the operator's token)."""
    from claudeq.accounts import AccountStore

    operator_only(viewer)
    try:
        pool = api.settings.accounts
    except ConfigError as exc:
        raise ApiError(503, f"accounts are not configured here: {exc.field}") from None
    store = AccountStore(api.client.store.redis, api.client.store.keys, pool)
    return AccountList(accounts=[s.public() for s in await run(store.states)])


@router.get("/tenants", response_model=TenantList, responses=problems(401, 403))
async def tenants(api: ApiDep, viewer: Caller) -> TenantList:
    """The tenants: runs in flight, jobs waiting, spend against caps (the operator's token)."""
    from claudeq.tenants import TenantStore

    operator_only(viewer)
    try:
        pool = api.settings.accounts.accounts
    except ConfigError:
        pool = []
    slots = sum(a.max_concurrency for a in pool) if api.settings.tenants.reserve_share and pool else None
    store = TenantStore(
        api.client.store.redis, api.client.store.keys, api.settings.tenants, accounts=[a.name for a in pool]
    )
    return TenantList(tenants=[u.public() for u in await run(lambda: store.usage(slots=slots))])


@router.get("/healthz", response_model=Health, responses={503: {"model": Problem, "description": "Redis is down."}})
async def healthz(api: ApiDep) -> Health:
    """Whether this server reaches the fleet's Redis (no token needed)."""
    await run(api.client.store.redis.ping)
    return Health(status="ok")
