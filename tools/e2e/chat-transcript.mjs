// Streams one chat completion from a running ds4j server with the official `openai` npm client and writes a
// transcript: the request, the server's verify/engine state from /props, the first and last SSE events (chunks as the
// client parsed them), the usage with timings and acceptance, and the streamed text.
//   node tools/e2e/chat-transcript.mjs BASE_URL OUT.json [PROMPT_REPEAT] [MAX_TOKENS]
// The openai package is resolved from src/test/node/node_modules (npm ci --prefix src/test/node).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';

const require = createRequire(resolve('src/test/node/package.json'));
const OpenAI = require('openai').default ?? require('openai');

const [base, out, repeatArg, maxArg] = process.argv.slice(2);
if (!base || !out) {
  console.error('usage: node tools/e2e/chat-transcript.mjs BASE_URL OUT.json [PROMPT_REPEAT] [MAX_TOKENS]');
  process.exit(2);
}
const repeat = Number(repeatArg ?? 1), maxTokens = Number(maxArg ?? 64);
const client = new OpenAI({ baseURL: base.replace(/\/$/, '') + '/v1', apiKey: process.env.DS4J_API_KEY ?? 'none', maxRetries: 0 });

// a long user message (a document to summarise) so that the attended rows pass the F16 path's 512-row threshold
const doc = Array.from({ length: repeat }, (_, i) =>
  `Section ${i + 1}. The harbour log records the tides, the weather and every ship that came and went that day.`).join('\n');
const request = {
  model: (await client.models.list()).data[0].id,
  messages: [
    { role: 'system', content: 'You are a concise assistant.' },
    { role: 'user', content: `Summarise this log in one sentence.\n\n${doc}` },
  ],
  max_tokens: maxTokens,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
};
const props = await (await fetch(base.replace(/\/$/, '') + '/props')).json();
const t0 = performance.now();
const stream = await client.chat.completions.create(request);
let first = null, last = null, text = '', chunks = 0, firstAt = null, usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  if (!first) { first = chunk; firstAt = performance.now() - t0; }
  last = chunk;
  const c = chunk.choices?.[0];
  if (c?.delta?.content) text += c.delta.content;
  if (c?.finish_reason) finish = c.finish_reason;
  if (chunk.usage) usage = chunk.usage;
}
const transcript = {
  client: `openai npm ${JSON.parse(readFileSync(resolve('src/test/node/node_modules/openai/package.json'), 'utf8')).version}, Node ${process.version}`,
  request: { ...request, messages: request.messages.map(m => ({ role: m.role, content: m.content.length > 300 ? m.content.slice(0, 300) + ` … (${m.content.length} characters)` : m.content })) },
  server: { verify: props.verify, engine: props.engine, draft: props.draft ?? props.speculative, model: props.model },
  stream: { chunks, first_event_ms: Math.round(firstAt), total_ms: Math.round(performance.now() - t0), finish_reason: finish },
  first_event: first,
  last_event: last,
  usage,
  text,
};
writeFileSync(out, JSON.stringify(transcript, null, 2) + '\n');
console.log(JSON.stringify({ out, chunks, finish, usage }, null, 0));
