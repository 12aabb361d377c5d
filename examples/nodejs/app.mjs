// A Node.js application that uses pgrag from SQL alone, through node-postgres.
//
// It keeps its documents in its own table, attaches a pgrag corpus to that table,
// asks multi-hop questions with pgrag.retrieve, edits a row and sees the corpus
// follow it, and asks pgrag.answer (the LLM loop runs inside PostgreSQL).
//
//   npm install
//   PGHOST=... PGDATABASE=... PGUSER=... node app.mjs [LLM_BASE_URL LLM_MODEL] < documents.json
//
// Connection settings come from the usual libpq variables (PGHOST, PGPORT,
// PGDATABASE, PGUSER, PGPASSWORD), which node-postgres reads itself. The documents
// ([{"title", "text"}, ...]) come on stdin. Every value is a bound parameter.
// It prints one JSON object on stdout: what each step returned.

import pg from "pg";

const CORPUS = "node-articles";
const [llmBaseUrl, llmModel] = process.argv.slice(2);

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function retrieve(client, question, method = "tigrag", k = 3) {
  const { rows } = await client.query(
    `SELECT rank, title, score, char_start, char_end, text, details
       FROM pgrag.retrieve($1, $2, $3, $4)`,
    [CORPUS, question, method, k]);
  return rows;
}

async function main() {
  const documents = await readStdin();
  const client = new pg.Client();
  await client.connect();
  const out = {};
  try {
    // The application's own table, nothing of pgrag's in it.
    await client.query("CREATE SCHEMA IF NOT EXISTS nodeapp");
    await client.query(`CREATE TABLE nodeapp.articles (
        id serial PRIMARY KEY, title text NOT NULL, body text, views integer NOT NULL DEFAULT 0)`);
    await client.query("BEGIN");
    for (const doc of documents) {
      await client.query("INSERT INTO nodeapp.articles (title, body) VALUES ($1, $2)", [doc.title, doc.text]);
    }
    await client.query("COMMIT");

    // Attach a corpus to it (triggers queue every change) and index the queue in the server.
    await client.query(
      `SELECT pgrag.attach($1, 'nodeapp.articles', id_column => 'id', text_column => 'body',
                           title_column => 'title', triples => 'spacy')`, [CORPUS]);
    out.indexed = (await client.query("SELECT pgrag.index($1) AS report", [CORPUS])).rows[0].report;

    out.before = await retrieve(client, "When did Lothair II's mother die?");

    // The application edits its own row; the corpus follows.
    await client.query("UPDATE nodeapp.articles SET body = $1 WHERE title = $2",
                       ["Lothair II was raised by his aunt Gisela in Friuli, far from Lotharingia.", "Lothair II"]);
    await client.query("UPDATE nodeapp.articles SET views = views + 1");  // not attached: queues nothing
    out.reindexed = (await client.query("SELECT pgrag.index($1) AS report", [CORPUS])).rows[0].report;
    out.after = await retrieve(client, "Who raised Lothair II?", "bm25", 1);

    // An answer, the LLM loop inside the server; the endpoint is set for this session.
    if (llmBaseUrl) {
      await client.query("SELECT set_config('pgrag.llm_base_url', $1, false), set_config('pgrag.llm_model', $2, false)",
                         [llmBaseUrl, llmModel]);
      const { rows } = await client.query(
        `SELECT answer, finish, llm_calls, trace -> 'outcome' AS outcome, trace -> 'steps' AS steps, hits
           FROM pgrag.answer($1, $2, 'cirag')`,
        [CORPUS, "Where was Lothair II raised?"]);
      out.answer = rows[0];
    }

    // An unknown corpus is an error with pgrag's own SQLSTATE (PR001).
    try {
      await client.query("SELECT * FROM pgrag.retrieve($1, $2)", ["no-such-corpus", "anything"]);
    } catch (error) {
      out.error = { code: error.code, message: error.message };
    }
  } finally {
    await client.end();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
