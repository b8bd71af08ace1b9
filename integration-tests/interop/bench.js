// BullMQ Node side of `just bench`: the same work as the Rust side, timed
// inside the process (Node start-up excluded), with this process's CPU over
// the timed section (process.cpuUsage: getrusage). Prints one JSON line.
// Usage: node bench.js <mode> <redis-url> <queue> <json-args>
'use strict';
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const [mode, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};
const conn = () => new IORedis(url, { maxRetriesPerRequest: null });

const cpuUs = (c0) => { const c = process.cpuUsage(c0); return c.user + c.system; };

async function addSingle(queue, n, inFlight) {
  let next = 0;
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  async function lane() {
    while (next < n) {
      const i = next++;
      await queue.add('bench', { i });
    }
  }
  await Promise.all(Array.from({ length: inFlight }, lane));
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, cpuUs: cpuUs(c0) };
}

async function addBulk(queue, n, batch) {
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (let done = 0; done < n; done += batch) {
    const jobs = [];
    for (let i = 0; i < Math.min(batch, n - done); i++) jobs.push({ name: 'bench', data: { i: done + i } });
    await queue.addBulk(jobs);
  }
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, cpuUs: cpuUs(c0) };
}

async function processAll(n, concurrency) {
  // The jobs were added beforehand (by the harness); time from worker start to
  // the n-th completion, with a no-op processor.
  let done = 0;
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const latencies = [];
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  const removeOnComplete = args.keep ? undefined : { count: 0 };
  const worker = new Worker(queueName, async (job) => {
    if (args.latency) latencies.push(Date.now() - job.timestamp);
    return null;
  }, { connection: conn(), prefix: 'emq', concurrency, removeOnComplete, autorun: true });
  worker.on('completed', () => { if (++done === n) finish(); });
  await finished;
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const cpu = cpuUs(c0);
  await worker.close();
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] : null;
  return { ms, cpuUs: cpu, p50: pct(0.5), p99: pct(0.99) };
}

// add → completed at `concurrency`: one add every 1000/rate ms, each timed
// from the add call to the worker's 'completed' event for it.
async function latency(queue, n, concurrency, rate) {
  const sent = new Array(n);
  const lat = [];
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const worker = new Worker(queueName, async () => null,
    { connection: conn(), prefix: 'emq', concurrency, autorun: true });
  worker.on('completed', (job) => {
    const t = sent[job.data.i];
    lat.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (lat.length === n) finish();
  });
  await worker.waitUntilReady();
  await new Promise((r) => setTimeout(r, 300));
  const every = 1000 / rate;
  const start = Date.now();
  for (let i = 0; i < n; i++) {
    const due = start + i * every;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    sent[i] = process.hrtime.bigint();
    await queue.add('lat', { i });
  }
  await finished;
  await worker.close();
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length - 1, Math.floor(lat.length * p))];
  return { p50: pct(0.5), p99: pct(0.99) };
}

async function main() {
  const connection = conn();
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  try {
    switch (mode) {
      case 'add-single': return await addSingle(queue, args.n, args.inFlight);
      case 'add-bulk': return await addBulk(queue, args.n, args.batch);
      case 'process': return await processAll(args.n, args.concurrency);
      case 'latency': return await latency(queue, args.n, args.concurrency || 1, args.rate || 500);
      default: throw new Error(`unknown mode ${mode}`);
    }
  } finally {
    await queue.close();
    await connection.quit();
  }
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0); },
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);
