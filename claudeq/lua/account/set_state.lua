-- SET_STATE (AccountStore): a rate-limit signal sets ok/warning but never overwrites `disabled` (only an operator
-- enables).
-- KEYS: account hash.
-- ARGV: state, warn_window
-- Result: 1 set, 0 the account is disabled.

if redis.call('HGET', KEYS[1], 'state') == 'disabled' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'warn_window', ARGV[2])
return 1
