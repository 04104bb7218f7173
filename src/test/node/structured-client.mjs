// Structured outputs against a running ds4j server through two client libraries nobody here wrote:
// the Vercel AI SDK's generateObject (@ai-sdk/openai-compatible, json_schema with strict) and LangChain JS's
// withStructuredOutput (@langchain/openai; jsonSchema and functionCalling methods, the latter a forced tool call).
// Both libraries validate the result against the zod schema themselves. The model has random weights, so only
// constrained decoding makes these succeed.
// Usage: node structured-client.mjs BASE_URL API_KEY MODEL; prints a final {"ok":true,...} line, exits non-zero on failure.
import { generateObject } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';

const [baseURL, apiKey, model] = process.argv.slice(2);
const person = z.object({
  name: z.string().describe('full name'),
  age: z.number().int(),
  score: z.number(),
  tags: z.array(z.string()).max(3),
  kind: z.enum(['employee', 'contractor']),
  contact: z.object({ email: z.string().nullable(), verified: z.boolean() }),
});
const results = {};

async function run() {
  const provider = createOpenAICompatible({ name: 'ds4j', baseURL, apiKey, supportsStructuredOutputs: true });
  for (const seed of [1, 2]) {
    const r = await generateObject({
      model: provider(model), schema: person, prompt: 'Describe an employee.', maxOutputTokens: 300,
      temperature: 1, seed, maxRetries: 0,
    });
    person.parse(r.object);
    results['ai-sdk-' + seed] = r.finishReason;
  }

  const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 1, maxTokens: 300, maxRetries: 0 });
  for (const method of ['jsonSchema', 'functionCalling']) {
    const structured = llm.withStructuredOutput(person, { method, name: 'person', strict: true });
    const o = await structured.invoke('Describe an employee.');
    person.parse(o);
    results['langchain-' + method] = Object.keys(o).length;
  }
  console.log(JSON.stringify({ ok: true, results }));
}

run().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  if (e && e.cause) console.error('cause:', e.cause);
  if (e && e.text !== undefined) console.error('text:', e.text);
  console.log(JSON.stringify({ ok: false, error: String(e && e.message) }));
  process.exit(1);
});
