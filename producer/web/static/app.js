// claudeq web: follow a running job's events (server-sent events from /jobs/ID/events), append the rows the
// server renders (already escaped), and fetch the page's summary again (facts, cost, result, timeline, attempts:
// /jobs/ID?part=summary) as the run moves and once it ends, so nothing needs a reload. The only script of the
// run view; no library.
"use strict";

// Events after which the summary changes: an attempt starts or ends, a tool is called, a wait begins.
const MOVES = new Set([
  "claimed", "run_started", "tool_call", "rate_limit", "result", "attempt_finished", "retry", "deferred", "requeued",
]);
const REFRESH_MS = 1000;

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("events");
  if (!list || list.dataset.live !== "1") return;
  const job = encodeURIComponent(list.dataset.job);
  const after = encodeURIComponent(list.dataset.after || "0-0");
  const source = new EventSource(`/jobs/${job}/events?after=${after}`);
  const status = document.getElementById("status");
  const summary = document.getElementById("summary");
  let pending = null;

  const refresh = async () => {
    pending = null;
    const answer = await fetch(`/jobs/${job}?part=summary`, { headers: { accept: "text/html" } });
    if (answer.ok && summary) summary.innerHTML = await answer.text();
  };
  const soon = () => {
    if (pending === null) pending = setTimeout(refresh, REFRESH_MS);
  };
  const ticking = setInterval(soon, 5 * REFRESH_MS); // the running bar grows with the clock

  source.onmessage = (message) => {
    const frame = JSON.parse(message.data);
    list.insertAdjacentHTML("beforeend", frame.html);
    list.lastElementChild.scrollIntoView({ block: "nearest" });
    if (MOVES.has(frame.type)) soon();
  };
  source.addEventListener("end", async (message) => {
    source.close();
    clearInterval(ticking);
    if (pending !== null) clearTimeout(pending);
    const frame = JSON.parse(message.data);
    const cancel = document.getElementById("cancel");
    if (cancel) cancel.closest("form").remove();
    await refresh();
    if (status) {
      status.textContent = frame.status;
      status.className = `status st-${frame.status}`;
    }
  });
});
