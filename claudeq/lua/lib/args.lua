-- args_list(t, first, last): t[first..last] (to its end when `last` is nil) as a list of its own: how a script's
-- binder names a variable-length part of its KEYS or ARGV (docs/architecture.md#script-arguments). Copied in a loop,
-- as unpack has a limit on how many values it returns.

local function args_list(t, first, last)
  local out = {}
  for i = first, last or #t do out[#out + 1] = t[i] end
  return out
end
