// claudeq web: follow a running job's events (server-sent events from /jobs/ID/events) and append the rows the
// server renders (already escaped). The only script of the run view; no library.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("events");
  if (!list || list.dataset.live !== "1") return;
  const job = encodeURIComponent(list.dataset.job);
  const after = encodeURIComponent(list.dataset.after || "0-0");
  const source = new EventSource(`/jobs/${job}/events?after=${after}`);
  const status = document.getElementById("status");
  source.onmessage = (message) => {
    const frame = JSON.parse(message.data);
    list.insertAdjacentHTML("beforeend", frame.html);
    list.lastElementChild.scrollIntoView({ block: "nearest" });
  };
  source.addEventListener("end", (message) => {
    source.close();
    const frame = JSON.parse(message.data);
    if (status) {
      status.textContent = frame.status;
      status.className = `status st-${frame.status}`;
    }
    const cancel = document.getElementById("cancel");
    if (cancel) cancel.closest("form").remove();
    const ended = document.getElementById("ended");
    if (ended) ended.hidden = false;
  });
});
