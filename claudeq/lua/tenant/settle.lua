-- SETTLE (TenantStore): count a finished attempt's cost (lib/settle.lua).
-- KEYS: (spend hash, reserved hash) pairs, see lib/settle.lua.
-- ARGV: settle's eight.
-- Result: 1

--!include lib/settle.lua

settle(KEYS, ARGV, 1)
return 1
