// BullMQ Node side of `just bench` (integration-tests/src/bin/bench.rs).
//
// The harness and this process take turns so that every client is measured
// over the same section: this process connects, constructs its Queue/Worker,
// runs a small warm-up of the same work on a side queue (scripts in Redis's
// cache, ioredis connected, V8's JIT warm), then prints {"ready":true}. The
// harness reads Redis's INFO and writes "go"; this process times the section
// (process.hrtime, and process.cpuUsage = getrusage for its CPU), prints one
// JSON line, and waits for "close" before it closes anything, so its closing
// commands fall outside the harness's second INFO reading.
//
// A caller that gives no stdin (bench_scale.rs) gets the same run without the
// turns; `"warm": 0` in the arguments skips the warm-up.
//
// Usage: node bench.js <mode> <redis-url> <queue> <json-args>
'use strict';
const readline = require('readline');
const { Queue, Worker, QueueEvents } = require('./pkg')('bullmq');
const IORedis = require('./pkg')('ioredis');

const [mode, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};
const conn = () => new IORedis(url, { maxRetriesPerRequest: null });
const WARM = args.warm === undefined ? 200 : args.warm;

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const nextLine = async () => { const r = await lines.next(); return r.done ? null : r.value; };

const closers = [];
const later = (f) => closers.push(f);

function pct(v, p) {
  v.sort((a, b) => a - b);
  return v.length ? v[Math.min(v.length - 1, Math.floor(v.length * p))] : null;
}

function countCompletions(worker) {
  let done = 0;
  let want = Infinity;
  let finish;
  worker.on('completed', () => { if (++done === want) finish(); });
  return (n) => new Promise((r) => { finish = r; want = done + n; if (done >= want) r(); });
}

async function addLanes(queue, n, inFlight) {
  let next = 0;
  async function lane() {
    while (next < n) {
      next++;
      await queue.add('bench', { i: 1 });
    }
  }
  await Promise.all(Array.from({ length: inFlight }, lane));
}

async function addBatches(queue, n, batch) {
  for (let done = 0; done < n; done += batch) {
    const jobs = [];
    for (let i = 0; i < Math.min(batch, n - done); i++) jobs.push({ name: 'bench', data: { i: done + i } });
    await queue.addBulk(jobs);
  }
}

// A worker on `name`, constructed and connected, not yet running.
async function idleWorker(name, concurrency, keep) {
  const removeOnComplete = keep ? undefined : { count: 0 };
  const w = new Worker(name, async () => null,
    { connection: conn(), prefix: 'emq', concurrency, removeOnComplete, autorun: false });
  await w.waitUntilReady();
  return w;
}

// The same work on a side queue, before "ready".
async function warmUp(connection) {
  if (!WARM) return;
  const side = `${queueName}-warm`;
  const q = new Queue(side, { connection, prefix: 'emq' });
  await q.waitUntilReady();
  if (mode === 'add-single') await addLanes(q, WARM, Math.min(WARM, args.inFlight || 1));
  else await addBatches(q, WARM, Math.min(WARM, args.batch || 100));
  if (mode === 'process' || mode.startsWith('latency')) {
    const w = await idleWorker(side, args.concurrency || 1, args.keep);
    const wait = countCompletions(w);
    w.run().catch(() => {});
    await wait(WARM);
    await w.close();
  }
  await q.close();
}

// Each returns the timed section (an async function giving extra fields).
const prepare = {
  'add-single': async (queue) => () => addLanes(queue, args.n, args.inFlight),
  'add-bulk': async (queue) => () => addBatches(queue, args.n, args.batch),
  // The jobs were added by the harness: from worker start to the n-th completion.
  process: async () => {
    const w = await idleWorker(queueName, args.concurrency, args.keep);
    later(() => w.close());
    const wait = countCompletions(w);
    return async () => {
      const finished = wait(args.n);
      w.run().catch((e) => { process.stderr.write(String(e) + '\n'); process.exit(1); });
      await finished;
    };
  },
  // add → completed, one job at a time as a user would: the clock read before
  // the add call, the add awaited, then the worker's own 'completed' and a
  // QueueEvents subscriber's 'completed' for that job, each stamped on receipt.
  latency: async (queue) => {
    const w = new Worker(queueName, async () => null,
      { connection: conn(), prefix: 'emq', concurrency: 1 });
    const qe = new QueueEvents(queueName, { connection: conn(), prefix: 'emq' });
    later(() => qe.close());
    later(() => w.close());
    await Promise.all([w.waitUntilReady(), qe.waitUntilReady()]);
    // Arrival times by job id; a waiter registered before or after arrival.
    const seen = { w: new Map(), qe: new Map() };
    const waiting = { w: new Map(), qe: new Map() };
    const expect = (which, id) => new Promise((r) => {
      const t = seen[which].get(id);
      if (t !== undefined) { seen[which].delete(id); r(t); } else waiting[which].set(id, r);
    });
    const arrive = (which, id) => {
      const t = process.hrtime.bigint();
      const r = waiting[which].get(id);
      if (r) { waiting[which].delete(id); r(t); } else seen[which].set(id, t);
    };
    w.on('completed', (job) => arrive('w', job.id));
    qe.on('completed', ({ jobId }) => arrive('qe', jobId));
    // QueueEvents reads from '$' once its first XREAD is in: add until it
    // has seen one completion.
    for (;;) {
      const job = await queue.add('lat', { warm: true });
      const seen = await Promise.race([
        expect('qe', job.id).then(() => true),
        new Promise((r) => setTimeout(() => r(false), 200)),
      ]);
      if (seen) break;
    }
    for (const m of [seen.w, seen.qe, waiting.w, waiting.qe]) m.clear();
    return async () => {
      const lw = [];
      const lq = [];
      for (let i = 0; i < args.n; i++) {
        const t0 = process.hrtime.bigint();
        const job = await queue.add('lat', { i });
        const [tw, tq] = await Promise.all([expect('w', job.id), expect('qe', job.id)]);
        lw.push(Number(tw - t0) / 1e6);
        lq.push(Number(tq - t0) / 1e6);
      }
      return { p50: pct(lw, 0.5), p99: pct(lw, 0.99), qe_p50: pct(lq, 0.5), qe_p99: pct(lq, 0.99) };
    };
  },
  // The method of the earlier bench, kept to show the difference: one add
  // every 1000/rate ms, not waiting for its completion, timed from the add
  // call to the worker's 'completed'.
  'latency-paced': async (queue) => {
    const w = new Worker(queueName, async () => null,
      { connection: conn(), prefix: 'emq', concurrency: 1 });
    later(() => w.close());
    await w.waitUntilReady();
    await new Promise((r) => setTimeout(r, 300));
    return async () => {
      const n = args.n;
      const sent = new Map();
      const lat = [];
      let finish;
      const finished = new Promise((r) => { finish = r; });
      w.on('completed', (job) => {
        const t = sent.get(job.data.i);
        if (t === undefined) return;
        lat.push(Number(process.hrtime.bigint() - t) / 1e6);
        if (lat.length === n) finish();
      });
      const every = 1000 / (args.rate || 500);
      const start = Date.now();
      for (let i = 0; i < n; i++) {
        const wait = start + i * every - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        sent.set(i, process.hrtime.bigint());
        await queue.add('lat', { i });
      }
      await finished;
      return { p50: pct(lat, 0.5), p99: pct(lat, 0.99) };
    };
  },
};

async function main() {
  const connection = conn();
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  later(() => queue.close());
  await queue.waitUntilReady();
  const make = prepare[mode];
  if (!make) throw new Error(`unknown mode ${mode}`);
  await warmUp(connection);
  const run = await make(queue);
  say({ ready: true });
  // "go"; a closed stdin (a caller that does not take turns) is a go too.
  await nextLine();
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  const extra = (await run()) || {};
  const c = process.cpuUsage(c0);
  say({ ms: Number(process.hrtime.bigint() - t0) / 1e6, cpuUs: c.user + c.system, ...extra });
  await nextLine();
  for (const f of closers.reverse()) await f();
  await connection.quit();
}

main().then(
  () => process.exit(0),
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);
