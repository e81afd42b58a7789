import pg from 'pg';
import { withBench, DATABASE_URL, orderEvent, log, fmtInt, median } from '../lib.ts';
import { createOutbox } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';

const SECONDS = Number(process.env.S ?? 5);
await withBench('shapes', async (bench) => {
  const s = `"${bench.schema}"`;
  await bench.sql(`CREATE TABLE ${s}.customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0, spent bigint NOT NULL DEFAULT 0)`);
  await bench.sql(`INSERT INTO ${s}.customers (id) SELECT generate_series(0, 999)`);
  await bench.sql(`CREATE TABLE ${s}.orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer_id int NOT NULL, total bigint NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`);

  const t = bench.names.outbox;
  await bench.sql(`CREATE TABLE ${s}.plain (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL)`);
  if (process.env.DROP) for (const ix of process.env.DROP.split(',')) await bench.sql(`DROP INDEX ${s}."${ix}"`);
  const values = `INSERT INTO ${t} (id, type, aggregate_type, aggregate_id, key, destination, payload, headers, occurred_at, version) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`;
  const modes: Record<string, ((c: pg.Client, i: number, cust: number) => Promise<unknown>) | null> = {
    business: null,
    // jsonarray: async (c, i, cust) => { const { createOutbox: _ } = { createOutbox }; return (bench as any).outbox.enqueue(c, orderEvent(i, cust)); },
    // values: async (c, i, cust) => { const e = orderEvent(i, cust); return c.query(values, [crypto.randomUUID(), 'OrderPlaced', 'Order', String(i), String(cust), 'orders', JSON.stringify(e.payload), '{}', new Date().toISOString(), null]); },
    plainNamed: async (c, i, cust) => { const e = orderEvent(i, cust); return c.query({ name: 'plain1', text: `INSERT INTO ${s}.plain (payload) VALUES ($1)`, values: [JSON.stringify(e.payload)] }); },
    valuesNamed: async (c, i, cust) => { const e = orderEvent(i, cust); return c.query({ name: 'txbox_ins1', text: values, values: [crypto.randomUUID(), 'OrderPlaced', 'Order', String(i), String(cust), 'orders', JSON.stringify(e.payload), '{}', new Date().toISOString(), null] }); },
  };
  const { benchOutbox } = await import('../lib.ts');
  (bench as any).outbox = benchOutbox(bench, false);
  const res: Record<string, number[]> = {};
  for (let round = 0; round < 3; round++) {
    for (const [name, fn] of Object.entries(modes)) {
      await bench.sql(`TRUNCATE ${t}, ${s}.orders, ${s}.plain`); await bench.sql(`VACUUM ${s}.customers`); await bench.sql('CHECKPOINT');
      const clients = await Promise.all([0,1,2,3].map(async () => { const c = new pg.Client({ connectionString: DATABASE_URL }); await c.connect(); return c; }));
      let n = 0; const end = performance.now() + SECONDS * 1000; const st = performance.now();
      await Promise.all(clients.map(async (c) => { while (performance.now() < end) {
        const cust = Math.floor(Math.random() * 1000);
        await c.query('BEGIN');
        const { rows } = await c.query(`INSERT INTO ${s}.orders (customer_id, total, status) VALUES ($1, $2, 'placed') RETURNING id`, [cust, 100]);
        await c.query(`UPDATE ${s}.customers SET orders = orders + 1, spent = spent + $2 WHERE id = $1`, [cust, 100]);
        if (fn) await fn(c, Number(rows[0].id), cust);
        await c.query('COMMIT'); n++; } }));
      const rate = n * 1000 / (performance.now() - st);
      (res[name] ??= []).push(rate);
      await Promise.all(clients.map((c) => c.end()));
      log(`round ${round} ${name}: ${fmtInt(rate)} tx/s`);
    }
  }
  for (const [k, v] of Object.entries(res)) log(`${k}: median ${fmtInt(median(v))} (${(100 * (1 - median(v) / median(res.business!))).toFixed(1)}% slower)`);
});
