// Drives the real BullMQ Node client (prefix `emq`) for EchoMQ's interop tests.
// Usage: node driver.js <command> <redis-url> <queue> [json-args]
// Prints one JSON document on stdout; errors go to stderr with a non-zero exit.
'use strict';
const { Queue } = require('bullmq');
const IORedis = require('ioredis');

const [command, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  try {
    switch (command) {
      case 'add-mix': {
        // The same mix the Rust producer test adds.
        const jobs = [
          await queue.add('plain', { n: 1 }),
          await queue.add('delayed', { n: 2 }, { delay: 60000 }),
          await queue.add('prio', { n: 3 }, { priority: 5 }),
          await queue.add('lifo', { n: 4 }, { lifo: true }),
          await queue.add('custom', { n: 5 }, { jobId: 'custom-1', attempts: 3, backoff: 1000, removeOnComplete: true, keepLogs: 5 }),
          await queue.add('expo', { n: 6 }, { attempts: 4, backoff: { type: 'exponential', delay: 500 }, removeOnFail: { age: 3600, count: 10 } }),
        ];
        return jobs.map((j) => j.id);
      }
      case 'read-jobs': {
        const out = {};
        for (const id of args.ids) {
          const j = await queue.getJob(id);
          out[id] = j && {
            name: j.name, data: j.data, opts: j.opts, delay: j.delay, priority: j.priority,
            timestamp: j.timestamp, attemptsMade: j.attemptsMade, state: await j.getState(),
          };
        }
        return out;
      }
      case 'counts':
        return await queue.getJobCounts();
      default:
        throw new Error(`unknown command ${command}`);
    }
  } finally {
    await queue.close();
    await connection.quit();
  }
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out) + '\n'); },
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);
