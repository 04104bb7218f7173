// Drives a ds4j server running the scripted model with the official openai client's Responses API (run from
// ResponsesNodeClientTest): node responses-client.mjs BASE_URL API_KEY MODEL EXPECTED_JSON. BASE_URL ends in /v1;
// EXPECTED_JSON holds the scripted model's answers ({plain, thinking: [reasoning, text], json}). Prints one JSON line;
// exits 1 on the first mismatch.
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import assert from 'node:assert/strict';

const [baseURL, apiKey, model, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  strict: false,
};
const done = [];

// a plain answer; the same streamed through create({stream: true}) and through the SDK's stream helper, which rebuilds
// the response from the events
const plain = await client.responses.create({ model, input: 'Hi', store: false });
assert.equal(plain.object, 'response');
assert.equal(plain.status, 'completed');
assert.equal(plain.output_text, expected.plain);
assert.deepEqual(plain.output.map((i) => i.type), ['message']);
assert.ok(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0, JSON.stringify(plain.usage));
let deltas = '', completed = null, sequence = 0;
for await (const ev of await client.responses.create({ model, input: 'Hi', stream: true })) {
  assert.equal(ev.sequence_number, sequence++);
  if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  if (ev.type === 'response.completed') completed = ev.response;
}
assert.equal(deltas, expected.plain);
assert.equal(completed.status, 'completed');
assert.equal(completed.usage.output_tokens, plain.usage.output_tokens);
const helper = client.responses.stream({ model, input: 'Hi' });
let helped = '';
helper.on('response.output_text.delta', (e) => { helped += e.delta; });
const final = await helper.finalResponse();
assert.equal(helped, expected.plain);
assert.equal(final.output_text, expected.plain);
done.push('text');

// a function call, unstreamed and streamed, then its output sent back with the conversation as input items
const ask = 'What is the weather in Paris?';
const call = await client.responses.create({ model, input: ask, tools: [weather] });
const fc = call.output.find((i) => i.type === 'function_call');
assert.ok(fc, JSON.stringify(call.output));
assert.equal(fc.name, 'get_weather');
assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris', days: 3 });
assert.ok(fc.call_id.startsWith('call_'), fc.call_id);
const streamedCall = await client.responses.stream({ model, input: ask, tools: [weather] }).finalResponse();
const sfc = streamedCall.output.find((i) => i.type === 'function_call');
assert.deepEqual(JSON.parse(sfc.arguments), { city: 'Paris', days: 3 });
const answered = await client.responses.create({
  model, tools: [weather],
  input: [{ role: 'user', content: ask }, ...call.output, { type: 'function_call_output', call_id: fc.call_id, output: 'Sunny, 21 C' }],
});
assert.equal(answered.status, 'completed');
done.push('function_call');

// reasoning: a reasoning item with the reasoning text, then the message; streamed alike
const think = { model, input: 'Hi', reasoning: { effort: 'high' } };
const thought = await client.responses.create(think);
assert.deepEqual(thought.output.map((i) => i.type), ['reasoning', 'message']);
assert.equal(thought.output[0].content[0].text, expected.thinking[0]);
assert.equal(thought.output_text, expected.thinking[1]);
const streamedThought = await client.responses.stream(think).finalResponse();
assert.equal(streamedThought.output[0].content[0].text, expected.thinking[0]);
assert.equal(streamedThought.output_text, expected.thinking[1]);
done.push('reasoning');

// a strict json_schema format from a zod schema, parsed by the SDK
const parsed = await client.responses.parse({
  model, input: 'The forecast as JSON, please.',
  text: { format: zodTextFormat(z.object({ city: z.string(), days: z.number() }), 'forecast') },
});
assert.deepEqual(parsed.output_parsed, JSON.parse(expected.json));
done.push('json_schema');

// errors come back as the SDK's typed errors
await assert.rejects(client.responses.create({ model: 'gpt-nope', input: 'Hi' }),
  (e) => e instanceof OpenAI.NotFoundError && e.param === 'model');
await assert.rejects(client.responses.create({ model, input: 'Hi', previous_response_id: plain.id }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id' && /stores no responses/.test(e.message));
await assert.rejects(client.responses.retrieve(plain.id),
  (e) => e instanceof OpenAI.NotFoundError && e.code === 'response_not_found');
await assert.rejects(new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).responses.create({ model, input: 'Hi' }),
  (e) => e instanceof OpenAI.AuthenticationError);
done.push('errors');

// a stream given up on: the SDK aborts the request (the server cancels it)
const long = client.responses.stream({ model, input: 'Please count for a long time.', max_output_tokens: 3000 });
let chunks = 0;
try {
  for await (const ev of long) {
    if (ev.type === 'response.output_text.delta' && ++chunks === 3) long.abort();
  }
} catch (e) {
  if (!(e instanceof OpenAI.APIUserAbortError)) throw e;
}
// deltas already parsed when abort() runs may still be delivered (several events of one read under load), so more
// than 3 can be seen; the stream still ends long before its 3000 tokens
assert.ok(chunks >= 3 && chunks < 500, 'aborted after at least 3 deltas, saw ' + chunks);
done.push('abort');

console.log(JSON.stringify({ ok: true, done }));
