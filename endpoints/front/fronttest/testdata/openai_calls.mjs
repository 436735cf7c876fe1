// Makes calls through the official OpenAI Node SDK (npm package "openai"),
// as a user's program configured with a base URL would, and prints one
// JSON line per call on standard output for fronttest.Node.Calls (Go):
//   {"op": OP, "models": [{"id", "tier"}]}                    models
//   {"op": OP, "status", "tier", "model", "content"}          chat:MODEL
//   {"op": OP, "chunks", "aborted": true}                     abort:MODEL:N
//   {"op": OP, "error": {"message", "name", "status"}}        any call the SDK threw
//
// usage: node openai_calls.mjs BASE_URL OP...
// BASE_URL is the SDK's baseURL as a user sets it (http://HOST:PORT/v1, or
// a tier's http://HOST:PORT/reasoning/v1). OPs, run in order:
//   models         client.models.list()
//   chat:MODEL     one chat completion, not streamed (X-LLM-Tier read from
//                  the raw response)
//   abort:MODEL:N  a streamed chat completion abandoned after N chunks
//                  (stream.controller.abort(), as a program that stops
//                  reading does)
// The SDK's own defaults are kept (retries, timeout).
import OpenAI from 'openai';

const [base, ...ops] = process.argv.slice(2);
if (!base || ops.length === 0) {
  console.error('usage: node openai_calls.mjs BASE_URL OP...');
  process.exit(2);
}
const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');
const client = new OpenAI({ baseURL: base, apiKey: 'none' });
const messages = [{ role: 'user', content: 'count' }];

for (const op of ops) {
  const [kind, model, n] = op.split(':');
  try {
    if (kind === 'models') {
      const list = await client.models.list();
      out({ op, models: list.data.map((m) => ({ id: m.id, tier: m.tier ?? null })) });
    } else if (kind === 'chat') {
      const { data, response } = await client.chat.completions
        .create({ model, max_tokens: 4, messages })
        .withResponse();
      out({ op, status: response.status, tier: response.headers.get('x-llm-tier'), model: data.model,
        content: data.choices[0]?.message?.content ?? null });
    } else if (kind === 'abort') {
      const stream = await client.chat.completions.create({ model, stream: true, max_tokens: 10000, messages });
      let chunks = 0;
      for await (const _ of stream) {
        if (++chunks >= Number(n)) {
          stream.controller.abort();
          break;
        }
      }
      out({ op, chunks, aborted: true });
    } else {
      out({ op, error: { message: 'unknown op', name: 'usage', status: null } });
    }
  } catch (e) {
    out({ op, error: { message: String(e?.message ?? e), name: e?.constructor?.name ?? typeof e, status: e?.status ?? null } });
  }
}
