-- held(st, n, now) -> the time the hold lifts at the latest, or false: admission before exhaustion (the `held` rule;
-- `claudeq.account_state.held` is the same rule in Python). With the last `remaining` the API reported for requests
-- (`rq_rem`, window resetting at `rq_reset`, limit `rq_lim`) and tokens (`tk_rem`, `tk_reset`, `tk_lim`, about
-- `tk_est` tokens per request), a new run is held back while the runs in flight (n) may use up what is left:
-- left - n <= 0 requests, or left - n * tk_est <= 0 tokens. Once the window has reset, what is left is its limit.

local function left(rem, reset, lim, now)
  if rem and reset and reset > now then return rem, reset end
  return lim, now + 1
end
local function held(st, n, now)
  local rq, rq_at = left(tonumber(st.rq_rem), tonumber(st.rq_reset), tonumber(st.rq_lim), now)
  if rq and rq - n <= 0 then return rq_at end
  local tk, tk_at = left(tonumber(st.tk_rem), tonumber(st.tk_reset), tonumber(st.tk_lim), now)
  if tk and tk - n * (tonumber(st.tk_est) or 0) <= 0 then return tk_at end
  return false
end
