// Drives a ds4j server running the scripted model with the official @anthropic-ai/sdk client (run from
// AnthropicNodeClientTest): node anthropic-client.mjs BASE_URL API_KEY MODEL EXPECTED_JSON. EXPECTED_JSON holds the
// scripted model's answers ({plain, thinking: [reasoning, text]}). Prints one JSON line; exits 1 on the first mismatch.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const [baseURL, apiKey, model, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const weather = {
  name: 'get_weather',
  description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
};
const ask = (content, extra = {}) => ({ model, max_tokens: 200, messages: [{ role: 'user', content }], ...extra });
const done = [];

// a plain answer, and the same streamed through the SDK's helper, which rebuilds the message from the events
const plain = await client.messages.create(ask('Hi'));
assert.equal(plain.type, 'message');
assert.equal(plain.stop_reason, 'end_turn');
assert.deepEqual(plain.content, [{ type: 'text', text: expected.plain }]);
let streamedText = '';
const stream = client.messages.stream(ask('Hi'));
stream.on('text', (t) => { streamedText += t; });
const streamed = await stream.finalMessage();
assert.equal(streamedText, expected.plain);
assert.deepEqual(streamed.content, plain.content);
assert.equal(streamed.stop_reason, 'end_turn');
assert.equal(streamed.usage.output_tokens, plain.usage.output_tokens);
done.push('text');

// count_tokens counts the prompt the request ran
const counted = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'Hi' }] });
assert.equal(counted.input_tokens, plain.usage.input_tokens + (plain.usage.cache_read_input_tokens ?? 0));
done.push('count_tokens');

// a tool call, unstreamed and streamed (the SDK parses the streamed input_json_delta fragments), then its result
const call = await client.messages.create(ask('What is the weather in Paris?', { tools: [weather] }));
assert.equal(call.stop_reason, 'tool_use');
const use = call.content.find((b) => b.type === 'tool_use');
assert.ok(use.id.startsWith('toolu_'), use.id);
assert.equal(use.name, 'get_weather');
assert.deepEqual(use.input, { city: 'Paris', days: 3 });
const streamedCall = await client.messages.stream(ask('What is the weather in Paris?', { tools: [weather] })).finalMessage();
assert.deepEqual(streamedCall.content.find((b) => b.type === 'tool_use').input, { city: 'Paris', days: 3 });
const answered = await client.messages.create({
  model, max_tokens: 200, tools: [weather],
  messages: [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: call.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C' }] },
  ],
});
assert.equal(answered.type, 'message');
done.push('tool_use');

// thinking: a thinking block, then the text; streamed alike
const think = ask('Hi', { thinking: { type: 'enabled', budget_tokens: 1024 } });
const thought = await client.messages.create(think);
assert.deepEqual(thought.content.map((b) => b.type), ['thinking', 'text']);
assert.equal(thought.content[0].thinking, expected.thinking[0]);
assert.equal(thought.content[1].text, expected.thinking[1]);
const streamedThought = await client.messages.stream(think).finalMessage();
assert.deepEqual(streamedThought.content, thought.content);
done.push('thinking');

// errors come back as the SDK's typed errors
await assert.rejects(client.messages.create({ ...ask('Hi'), model: 'claude-nope' }),
  (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'Hi' }] }),
  (e) => e instanceof Anthropic.BadRequestError && /max_tokens/.test(e.error?.error?.message));
await assert.rejects(new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 }).messages.create(ask('Hi')),
  (e) => e instanceof Anthropic.AuthenticationError);
done.push('errors');

// a stream given up on: the SDK aborts the request (the server cancels it)
const long = client.messages.stream(ask('Please count for a long time.', { max_tokens: 3000 }));
let chunks = 0;
try {
  for await (const ev of long) {
    if (ev.type === 'content_block_delta' && ++chunks === 3) long.abort();
  }
} catch (e) {
  if (!(e instanceof Anthropic.APIUserAbortError)) throw e;
}
// deltas already parsed when abort() runs may still be delivered (several events of one read under load), so more
// than 3 can be seen; the stream still ends long before its 3000 tokens
assert.ok(chunks >= 3 && chunks < 500, 'aborted after at least 3 deltas, saw ' + chunks);
done.push('abort');

console.log(JSON.stringify({ ok: true, done }));
