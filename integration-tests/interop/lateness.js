// BullMQ Node side of the "delayed job lateness" rows of `just bench`: one
// Worker that records, for each of n delayed jobs, the start of its processor
// minus the job's due time (timestamp + opts.delay), and processedOn minus it.
// Usage: node lateness.js <redis-url> <queue> <json-args {n, concurrency}>
// Prints "ready" once the worker runs, then one JSON line when n jobs started.
'use strict';
const { Worker } = require('bullmq');
const IORedis = require('ioredis');

const [url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const entry = [];
  const processedOn = [];
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const worker = new Worker(queueName, async (job) => {
    // Sub-millisecond wall time, on the same clock as Date.now().
    const now = performance.timeOrigin + performance.now();
    const due = job.timestamp + (job.opts.delay || 0);
    entry.push(now - due);
    processedOn.push(job.processedOn - due);
    if (entry.length === args.n) finish();
    return null;
  }, { connection, prefix: 'emq', concurrency: args.concurrency || 8 });
  await worker.waitUntilReady();
  process.stdout.write('ready\n');
  await finished;
  await worker.close();
  await connection.quit();
  return { entry, processedOn };
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0); },
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);
