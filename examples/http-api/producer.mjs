// A claudeq producer in Node.js (20+, no packages): submit a job over the HTTP API, follow its events, print the answer.
// CLAUDEQ_API=http://127.0.0.1:8781/api/v1 CLAUDEQ_TOKEN=<token> node producer.mjs "Summarise README.md"
const api = process.env.CLAUDEQ_API ?? "http://127.0.0.1:8781/api/v1";
const auth = { authorization: `Bearer ${process.env.CLAUDEQ_TOKEN}` };
const submitted = await fetch(`${api}/jobs`, {
  method: "POST",
  headers: { ...auth, "content-type": "application/json" },
  body: JSON.stringify({ prompt: process.argv[2] ?? "Say hello" }),
});
if (!submitted.ok) throw new Error(`submit: ${submitted.status} ${await submitted.text()}`);
const { id } = await submitted.json();
// Server-sent events: one frame per event ("id: …" and "data: {json}"), then "event: end" when the job ends.
const stream = await fetch(`${api}/jobs/${id}/events`, { headers: { ...auth, accept: "text/event-stream" } });
let buffered = "";
for await (const chunk of stream.body.pipeThrough(new TextDecoderStream())) {
  const frames = (buffered += chunk).split("\n\n");
  buffered = frames.pop();
  for (const frame of frames.filter((f) => f.includes("data: "))) {
    const data = JSON.parse(frame.slice(frame.indexOf("data: ") + 6));
    console.error(frame.startsWith("event: end") ? `ended ${data.status}` : `${data.at} ${data.type}`);
  }
}
const record = await (await fetch(`${api}/jobs/${id}`, { headers: auth })).json();
console.log(record.result?.text ?? record.error?.message);
process.exitCode = record.status === "succeeded" ? 0 : 1;
