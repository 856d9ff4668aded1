// sdk_tools.mjs BASE_URL — the official OpenAI Node client's tool loop against
// specd: a required call (tool_calls, finish_reason "tool_calls", arguments
// that zod validates against the tool's schema), the tool's result sent back
// as role "tool", a final answer; a named tool_choice; a streamed call read
// with the client's stream helper. Prints one JSON line of findings.
import OpenAI from 'openai';
import { z } from 'zod';

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;
const Weather = z.object({ city: z.string().max(8), unit: z.enum(['celsius', 'fahrenheit']) }).strict();
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Get the weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'search', description: 'Search the web',
    parameters: { type: 'object', properties: { q: { type: 'string', maxLength: 6 } }, required: ['q'], additionalProperties: false } } },
];
const out = {};
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const r1 = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', max_tokens: 120, temperature: 0 });
const c1 = r1.choices[0];
out.finish1 = c1.finish_reason;
out.calls = (c1.message.tool_calls || []).map(t => ({ id: t.id, name: t.function.name, args: t.function.arguments }));
const weather = out.calls.find(c => c.name === 'get_weather');
out.args_ok = out.calls.length > 0 && out.calls.every(c => {
  try { const a = JSON.parse(c.args); return c.name === 'get_weather' ? Weather.safeParse(a).success : typeof a.q === 'string'; }
  catch { return false; }
});
messages.push(c1.message);
for (const c of c1.message.tool_calls || [])
  messages.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify({ temperature: 21, unit: 'celsius' }) });
const r2 = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', max_tokens: 24, temperature: 0 });
out.finish2 = r2.choices[0].finish_reason;
out.final = r2.choices[0].message.content;
out.final_calls = (r2.choices[0].message.tool_calls || []).length;
const r3 = await client.chat.completions.create({ model, messages: messages.slice(0, 1), tools, max_tokens: 120, temperature: 0,
  tool_choice: { type: 'function', function: { name: 'search' } } });
out.named = (r3.choices[0].message.tool_calls || []).map(t => t.function.name);
const stream = await client.chat.completions.create({ model, messages: messages.slice(0, 1), tools, tool_choice: 'required',
  max_tokens: 120, temperature: 0, stream: true });
const deltas = [];
let sfinish = null;
for await (const ch of stream) {
  const d = ch.choices[0]?.delta;
  if (d?.tool_calls) deltas.push(...d.tool_calls);
  if (ch.choices[0]?.finish_reason) sfinish = ch.choices[0].finish_reason;
}
out.stream_finish = sfinish;
out.stream_calls = deltas.filter(d => d.function?.name).map(d => d.function.name);
console.log(JSON.stringify(out));
