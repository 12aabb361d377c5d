// A Node.js application that asks pgrag over HTTP (`pgrag serve`, docs/http.md),
// with nothing but Node's built-in fetch: for a database without PL/Python (a
// managed PostgreSQL), where SQL's pgrag.retrieve cannot run.
//
//   pgrag serve --dsn postgresql://reader@host/db          # beside the database
//   PGRAG_URL=http://127.0.0.1:8765 node http.mjs [CORPUS] [QUESTION] [FILTER_JSON]
//
// PGRAG_API_KEY, where the service was started with one, goes as a Bearer token.
// It asks QUESTION with every main method (the filter where the method takes one),
// asks an answering method for an answer, makes one bad request, and prints one
// JSON object on stdout: what each call returned.

const BASE = (process.env.PGRAG_URL || "http://127.0.0.1:8765").replace(/\/$/, "");
const API_KEY = process.env.PGRAG_API_KEY;
const [corpus = "pgrag-sample", question = "When did Lothair II's mother die?", filterText] = process.argv.slice(2);
const filter = filterText ? JSON.parse(filterText) : null;

// One call: the parsed JSON body and the HTTP status. pgrag's errors are JSON too:
// {"error": {"message", "sqlstate", "type"}}.
async function call(path, body) {
  const headers = { Accept: "application/json" };
  if (API_KEY) headers.Authorization = `Bearer ${API_KEY}`;
  const init = { headers };
  if (body !== undefined) {
    init.method = "POST";
    init.body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";  // the service reads JSON only
  }
  const response = await fetch(`${BASE}${path}`, init);
  return { status: response.status, body: await response.json() };
}

async function ok(path, body) {
  const { status, body: result } = await call(path, body);
  if (status !== 200) throw new Error(`${path}: HTTP ${status} ${JSON.stringify(result.error)}`);
  return result;
}

// The hit's provenance, as an application keeps it: where the text is in the document.
function hitSummary(hit) {
  const { rank, chunk_id, score, external_id, title, char_start, char_end, hop, text } = hit;
  return { rank, chunk_id, score, external_id, title, char_start, char_end, hop, text };
}

async function main() {
  const out = { health: await ok("/health") };
  const { methods } = await ok("/v1/methods");
  const mainMethods = methods.filter((m) => m.main);
  out.methods = mainMethods.map(({ name, filter, llm, answers }) => ({ name, filter, llm, answers }));
  out.corpora = (await ok("/v1/corpora")).corpora.map((c) => c.name);

  // Every main method, the filter where the method takes one.
  out.retrieve = {};
  for (const method of mainMethods) {
    const body = { question, method: method.name, k: 3 };
    if (filter && method.filter) body.filter = filter;
    const result = await ok(`/v1/corpora/${encodeURIComponent(corpus)}/retrieve`, body);
    out.retrieve[method.name] = { hits: result.hits.map(hitSummary), steps: result.trace.steps.map((s) => s.step) };
  }

  // An answer (the service's LLM; without one, answer is null and the hits are the fallback's).
  const answer = await ok(`/v1/corpora/${encodeURIComponent(corpus)}/answer`,
                          { question, method: "cirag", k: 3, ...(filter ? { filter } : {}) });
  out.answer = { answer: answer.answer, finish: answer.finish, llm_calls: answer.llm_calls,
                 hits: answer.hits.map((h) => h.title) };

  // Bad requests: pgrag's error as JSON, with its SQLSTATE and the HTTP status.
  out.errors = {
    unknown_method: await call(`/v1/corpora/${encodeURIComponent(corpus)}/retrieve`, { question, method: "nope" }),
    unknown_corpus: await call("/v1/corpora/no-such-corpus/retrieve", { question }),
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
