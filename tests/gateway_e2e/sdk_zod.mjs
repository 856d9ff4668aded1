// sdk_zod.mjs BASE_URL RUNS — the official OpenAI Node client with schemas made
// by zod through zodResponseFormat, against a specd server: for each schema,
// RUNS seeded chat requests at temperature 1; prints one JSON line per answer
// {name, schema, content, finish, zod_ok, zod_error}. test_schema_sdk.py
// checks every finished answer with python3-jsonschema as well.
import OpenAI from 'openai';
import { z } from 'zod';
import { zodResponseFormat } from 'openai/helpers/zod';

const [base, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 3);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });

const schemas = {
  person: z.object({
    name: z.string().max(12),
    age: z.number().int().min(0).max(120),
    role: z.enum(['admin', 'user', 'guest']),
    tags: z.array(z.string().max(8)).max(3),
    nick: z.string().max(8).optional().nullable(),
    address: z.object({ zip: z.string().regex(/^\d{5}$/), city: z.string().max(10) }),
    score: z.number().int().positive().lte(1000).nullable(),
  }),
  order: z.object({
    id: z.string().uuid(),
    items: z.array(z.object({ sku: z.string().regex(/^[A-Z]{3}-\d{3}$/), qty: z.number().int().gte(1).lte(99) })).min(1).max(3),
    status: z.enum(['open', 'paid', 'shipped']),
    discount: z.number().int().gte(-10).lt(50),
    note: z.string().max(10).nullable(),
  }),
  event: z.object({
    day: z.string().date(),
    kind: z.union([z.literal('meeting'), z.literal('call')]),
    attendees: z.number().int().nonnegative().max(12),
    email: z.string().email(),
  }),
};

const model = (await client.models.list()).data[0].id; // the served model's name (others are 404 model_not_found)
for (const [name, S] of Object.entries(schemas)) {
  const rf = zodResponseFormat(S, name);
  for (let seed = 1; seed <= runs; seed++) {
    let out = { name, schema: rf.json_schema.schema, seed };
    try {
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: 'Give me a ' + name + '.' }],
        response_format: rf, temperature: 1, seed, max_tokens: 400,
      });
      const c = r.choices[0];
      out.content = c.message.content;
      out.finish = c.finish_reason;
      let parsed;
      try { parsed = JSON.parse(c.message.content); } catch (e) { parsed = undefined; out.zod_error = 'not JSON: ' + e.message; }
      if (parsed !== undefined) {
        const v = S.safeParse(parsed);
        out.zod_ok = v.success;
        if (!v.success) out.zod_error = JSON.stringify(v.error.issues).slice(0, 300);
      }
    } catch (e) {
      out.error = String(e && e.message || e).slice(0, 300);
    }
    console.log(JSON.stringify(out));
  }
}
