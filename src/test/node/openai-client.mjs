// Drives a running ds4j server with the official openai npm client, as a real application would.
// Usage: node openai-client.mjs BASE_URL API_KEY MODEL   (BASE_URL like http://127.0.0.1:8080/v1)
// Prints one JSON line per check and a final {"ok":true,...} line; exits non-zero on the first failure.
import OpenAI from 'openai';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const messages = [{ role: 'user', content: 'Say something.' }];
const results = {};

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
}

function checkUsage(u, maxTokens, what) {
  check(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, what + ': usage.prompt_tokens');
  check(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 1 && u.completion_tokens <= maxTokens, what + ': usage.completion_tokens');
  check(u.total_tokens === u.prompt_tokens + u.completion_tokens, what + ': usage.total_tokens');
}

async function run() {
  // models
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  check(models.includes(model), 'models.list contains ' + model + ': ' + models);
  results.models = models;

  // non-streaming chat
  const full = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  check(full.object === 'chat.completion', 'object');
  check(typeof full.choices[0].message.content === 'string', 'message.content is a string');
  check(full.choices[0].message.role === 'assistant', 'role');
  check(['stop', 'length'].includes(full.choices[0].finish_reason), 'finish_reason ' + full.choices[0].finish_reason);
  checkUsage(full.usage, 8, 'non-stream');
  results.nonStream = { content: full.choices[0].message.content, usage: full.usage.completion_tokens };

  // streaming chat with usage
  for (const includeUsage of [true, false]) {
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 8, temperature: 0, stream: true,
      ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
    });
    let first = true, text = '', finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      check(chunk.object === 'chat.completion.chunk', 'chunk object');
      if (chunk.usage) {
        check(chunk.choices.length === 0, 'the usage chunk has no choices');
        usage = chunk.usage;
        continue;
      }
      const c = chunk.choices[0];
      if (first) {
        check(c.delta.role === 'assistant', 'the first chunk carries the role');
        first = false;
      }
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    check(finish === 'stop' || finish === 'length', 'stream finish_reason ' + finish);
    if (includeUsage) {
      checkUsage(usage, 8, 'stream');
      check(text === full.choices[0].message.content, 'greedy stream text equals the non-stream text');
    } else {
      check(usage === null, 'no usage chunk without stream_options.include_usage');
    }
    results['stream_usage_' + includeUsage] = { chunks, text, usage: usage && usage.completion_tokens };
  }

  // the streaming helper assembles the message
  const runner = client.chat.completions.stream({ model, messages, max_tokens: 6, temperature: 0 });
  let deltas = '';
  runner.on('content', (d) => { deltas += d; });
  const final = await runner.finalChatCompletion();
  check(final.choices[0].message.content === deltas, 'stream helper: final content equals the deltas');
  results.helper = final.choices[0].message.content;

  // tools and thinking are accepted
  const withTools = await client.chat.completions.create({
    model, max_tokens: 4, temperature: 0, reasoning_effort: 'high',
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  });
  check(withTools.choices.length === 1, 'tools + reasoning_effort request answered');

  // legacy completions, both ways
  const comp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  check(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string', 'completions object');
  checkUsage(comp.usage, 5, 'completions');
  let ctext = '';
  for await (const c of await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, stream: true })) {
    ctext += c.choices[0]?.text ?? '';
  }
  check(ctext === comp.choices[0].text, 'streamed completion equals the non-streamed one');

  // predicted outputs: the greedy answer sent back as the prediction changes nothing, and is (mostly) accepted
  const plainAnswer = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  const expected = plainAnswer.choices[0].message.content;
  const pd0 = plainAnswer.usage.completion_tokens_details;
  check(pd0 && pd0.accepted_prediction_tokens === 0 && pd0.rejected_prediction_tokens === 0,
    'prediction counts are present as 0 without a prediction: ' + JSON.stringify(pd0));
  const predicted = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0,
    prediction: { type: 'content', content: expected } });
  check(predicted.choices[0].message.content === expected, 'a prediction does not change the greedy answer');
  const pd = predicted.usage.completion_tokens_details;
  check(Number.isInteger(pd.accepted_prediction_tokens) && Number.isInteger(pd.rejected_prediction_tokens), 'prediction counts are integers');
  check(pd.accepted_prediction_tokens > 0, 'the answer sent back as the prediction is accepted: ' + JSON.stringify(predicted.usage));
  check(pd.accepted_prediction_tokens + pd.rejected_prediction_tokens <= predicted.usage.timings.draft_n,
    'accepted + rejected prediction tokens are part of the draft tokens offered');
  let ptext = '', pusage = null;
  for await (const c of await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true },
    prediction: { type: 'content', content: [{ type: 'text', text: expected.slice(0, 5) }, { type: 'text', text: expected.slice(5) }] } })) {
    ptext += c.choices[0]?.delta?.content ?? '';
    if (c.usage) pusage = c.usage;
  }
  check(ptext === expected, 'streamed answer with a prediction in text parts equals the greedy answer');
  check(pusage && pusage.completion_tokens_details.accepted_prediction_tokens === pd.accepted_prediction_tokens
    && pusage.completion_tokens_details.rejected_prediction_tokens === pd.rejected_prediction_tokens,
    'streamed usage carries the same prediction counts: ' + JSON.stringify(pusage));
  try {
    await client.chat.completions.create({ model, messages, prediction: { type: 'content', content: [{ type: 'image_url', image_url: { url: 'x' } }] } });
    check(false, 'a prediction with an image part must fail');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, 'BadRequestError for an image part in the prediction, got ' + e);
    check(e.param === 'prediction.content[0].type', 'error.param names the part, got ' + e.param);
  }
  results.prediction = { accepted: pd.accepted_prediction_tokens, rejected: pd.rejected_prediction_tokens, completion: predicted.usage.completion_tokens };

  // n choices come back in index order; past the server's bound n is a typed SDK error with the field named
  const two = await client.chat.completions.create({ model, messages, n: 2, max_tokens: 4 });
  check(two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1,
    'two choices in index order, got ' + JSON.stringify(two.choices));
  try {
    await client.chat.completions.create({ model, messages, n: 1000 });
    check(false, 'n=1000 must fail');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, 'BadRequestError for n=1000, got ' + e);
    check(e.param === 'n', 'error.param is n, got ' + e.param);
  }
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages });
    check(false, 'unknown model must fail');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, 'NotFoundError for an unknown model, got ' + e);
  }

  // aborting a stream mid-way (the server must cancel it; the Java side checks)
  const ac = new AbortController();
  const long = await client.chat.completions.create({ model, messages, max_tokens: 5000, stream: true, ignore_eos: true },
    { signal: ac.signal });
  let seen = 0;
  try {
    for await (const chunk of long) {
      if (chunk.choices[0]?.delta?.content && ++seen === 3) ac.abort();
    }
  } catch (e) {
    check(e.name === 'APIUserAbortError' || e.name === 'AbortError', 'abort error, got ' + e);
  }
  // chunks already parsed when abort() runs may still be delivered, so more than 3 can be seen under load
  check(seen >= 3 && seen < 5000, 'aborted after at least 3 content chunks, saw ' + seen);
  results.aborted = true;
}

run().then(() => {
  console.log(JSON.stringify({ ok: true, ...results }));
}).catch((e) => {
  console.error(JSON.stringify({ ok: false, error: String(e && e.stack || e) }));
  process.exit(1);
});
