// Streams one chat completion through the official OpenAI Node SDK (npm
// package "openai"), as a user's program would, and prints what it got as
// JSON lines on standard output for fronttest.Node (Go) to read:
//   {"sdk": VERSION, "node": VERSION}          first
//   every chunk the SDK yields, as it arrives   (the SDK's own objects)
//   {"end": true}                               the stream ended normally
//   {"error": {"message", "name", "status"}}    the SDK threw (exit 1)
//
// usage: node openai_stream.mjs BASE_URL MODEL MAX_TOKENS
// BASE_URL is the front door's root (http://127.0.0.1:PORT); the SDK's own
// defaults are kept (retries, timeout), as a new user's would be.
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const [base, model, maxTokens] = process.argv.slice(2);
if (!base || !model || !maxTokens) {
  console.error('usage: node openai_stream.mjs BASE_URL MODEL MAX_TOKENS');
  process.exit(2);
}
const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');
out({ sdk: VERSION, node: process.version });
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none' });
try {
  const stream = await client.chat.completions.create({
    model,
    stream: true,
    max_tokens: Number(maxTokens),
    messages: [{ role: 'user', content: 'count' }],
  });
  for await (const chunk of stream) {
    out(chunk);
  }
  out({ end: true });
} catch (e) {
  out({ error: { message: String(e?.message ?? e), name: e?.constructor?.name ?? typeof e, status: e?.status ?? null } });
  process.exitCode = 1;
}
