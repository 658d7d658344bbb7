-- SET_STATE (AccountStore): a rate-limit signal sets ok/warning but never overwrites `disabled` (only an operator
-- enables).
-- KEYS: `account` (its hash).
-- ARGV: `state`, `warn_window`
-- Result: 1 set, 0 the account is disabled.

local account = KEYS[1]
local state = ARGV[1]
local warn_window = ARGV[2]

if redis.call('HGET', account, 'state') == 'disabled' then return 0 end
redis.call('HSET', account, 'state', state, 'warn_window', warn_window)
return 1
