-- account_state(hash) -> st: the account hash's admission fields, read once per script run (one HMGET; a second one
-- reads the `pu:<window>` fields of the windows `pws` lists). `st` is that copy, and every write to one of these
-- fields (lib/gate.lua, lib/admit.lua) updates it, so a script that gates several times (a release handing out slots,
-- an acquire looking at the waiting lines) reads the hash once instead of field by field. The fields are described in
-- claudeq/accounts/_store.py. Also defines `unpack_` (table.unpack or unpack) for the scripts that include it.

local FIELDS = {'state', 'cooldown_until', 'cd:opus', 'cd:sonnet', 'cd:haiku', 'rq_rem', 'rq_reset', 'rq_lim',
                'tk_rem', 'tk_reset', 'tk_lim', 'tk_est', 'pws', 'ramp_at', 'ramp_j', 'ramp_last', 'ramp_n', 'wq'}
local unpack_ = table.unpack or unpack
local function account_state(hash)
  local v = redis.call('HMGET', hash, unpack_(FIELDS))
  local st = {}
  for i = 1, #FIELDS do st[FIELDS[i]] = v[i] end
  if st.pws then
    local fields = {}
    for w in string.gmatch(st.pws, '%S+') do fields[#fields + 1] = 'pu:' .. w end
    if #fields > 0 then
      local u = redis.call('HMGET', hash, unpack_(fields))
      for i = 1, #fields do st[fields[i]] = u[i] end
    end
  end
  return st
end
