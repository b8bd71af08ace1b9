// BullMQ Node side of `just bench`: the same work as the Rust side, timed
// inside the process (Node start-up excluded). Prints one JSON line.
// Usage: node bench.js <mode> <redis-url> <queue> <json-args>
'use strict';
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const [mode, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};
const conn = () => new IORedis(url, { maxRetriesPerRequest: null });

async function addSingle(queue, n, inFlight) {
  let next = 0;
  const t0 = process.hrtime.bigint();
  async function lane() {
    while (next < n) {
      const i = next++;
      await queue.add('bench', { i });
    }
  }
  await Promise.all(Array.from({ length: inFlight }, lane));
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

async function addBulk(queue, n, batch) {
  const t0 = process.hrtime.bigint();
  for (let done = 0; done < n; done += batch) {
    const jobs = [];
    for (let i = 0; i < Math.min(batch, n - done); i++) jobs.push({ name: 'bench', data: { i: done + i } });
    await queue.addBulk(jobs);
  }
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

async function processAll(n, concurrency) {
  // The jobs were added beforehand (by the harness); time from worker start to
  // the n-th completion, with a no-op processor.
  let done = 0;
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const latencies = [];
  const t0 = process.hrtime.bigint();
  const worker = new Worker(queueName, async (job) => {
    if (args.latency) latencies.push(Date.now() - job.timestamp);
    return null;
  }, { connection: conn(), prefix: 'emq', concurrency, removeOnComplete: { count: 0 }, autorun: true });
  worker.on('completed', () => { if (++done === n) finish(); });
  await finished;
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  await worker.close();
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] : null;
  return { ms, p50: pct(0.5), p99: pct(0.99) };
}

async function main() {
  const connection = conn();
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  try {
    switch (mode) {
      case 'add-single': return { ms: await addSingle(queue, args.n, args.inFlight) };
      case 'add-bulk': return { ms: await addBulk(queue, args.n, args.batch) };
      case 'process': return await processAll(args.n, args.concurrency);
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
