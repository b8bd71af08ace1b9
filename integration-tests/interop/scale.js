// BullMQ Node side of `just bench-scale`: the reads an operator's tool makes
// through BullMQ on a large queue, timed inside the process (Node start-up
// excluded). Prints one JSON line: the median and the largest of each, ms.
// Usage: node scale.js <redis-url> <queue> <json-args {"rounds": n}>
'use strict';
const { Queue } = require('bullmq');
const IORedis = require('ioredis');

const [url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};
const rounds = args.rounds || 20;

async function timed(f) {
  const ms = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    await f();
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  return { p50: ms[Math.floor(ms.length / 2)], max: ms[ms.length - 1] };
}

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  try {
    await queue.waitUntilReady();
    const out = {
      getJobCounts: await timed(() => queue.getJobCounts()),
      getJobsWaiting: await timed(() => queue.getJobs(['waiting'], 0, 24)),
      getJobsCompleted: await timed(() => queue.getJobs(['completed'], 0, 24)),
    };
    process.stdout.write(JSON.stringify(out) + '\n');
  } finally {
    await queue.close();
    await connection.quit();
  }
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
