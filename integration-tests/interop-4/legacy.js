// BullMQ 4.18.3 adds legacy repeatable jobs (prefix `bull`): the old
// `name:id:endDate:tz:pattern` members of `repeat`, each with its delayed
// iteration, which `echomq adopt` converts into job schedulers.
// Usage: node legacy.js <redis-url> <queue> <json: [{name, data, repeat, jobId?}]>
// Prints the created iteration ids as a JSON array.
'use strict';
const { Queue } = require('bullmq');
const IORedis = require('ioredis');

async function main() {
  const [url, queueName, raw] = process.argv.slice(2);
  const specs = JSON.parse(raw);
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'bull' });
  try {
    const ids = [];
    for (const s of specs) {
      const opts = { repeat: s.repeat };
      if (s.jobId) opts.jobId = s.jobId;
      if (s.attempts) opts.attempts = s.attempts;
      const job = await queue.add(s.name, s.data, opts);
      ids.push(job.id);
    }
    process.stdout.write(JSON.stringify(ids));
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
