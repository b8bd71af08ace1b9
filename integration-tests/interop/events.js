// A BullMQ Node QueueEvents (prefix `emq`) for EchoMQ's interop tests.
// Usage: node events.js <redis-url> <queue> <json-options>
// Options: waitFor (a job id: also prints {"ev":"finished","value"} or
// {"ev":"finished-error","reason"} from job.waitUntilFinished).
// Prints {"ev":"ready"} once listening, then one line per event as Node
// delivers it: {"ev":"event","name","args"}. Exits when stdin closes.
'use strict';
const need = require('./pkg');
const { QueueEvents, Queue, Job } = need('bullmq');
const IORedis = need('ioredis');

const [url, queueName, rawOpts] = process.argv.slice(2);
const opts = rawOpts ? JSON.parse(rawOpts) : {};
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const qe = new QueueEvents(queueName, {
  connection: new IORedis(url, { maxRetriesPerRequest: null }), prefix: 'emq',
});
const names = ['added', 'waiting', 'active', 'progress', 'completed', 'failed', 'delayed',
  'retries-exhausted', 'stalled', 'drained', 'removed', 'paused', 'resumed', 'duplicated'];
for (const name of names) qe.on(name, (args) => out({ ev: 'event', name, args }));

qe.waitUntilReady().then(async () => {
  // The first XREAD is issued right after ready; give it a moment to block.
  await new Promise((r) => setTimeout(r, 200));
  out({ ev: 'ready' });
  if (opts.waitFor) {
    const queue = new Queue(queueName, { connection: new IORedis(url, { maxRetriesPerRequest: null }), prefix: 'emq' });
    let job = null;
    while (!job) {
      job = await Job.fromId(queue, opts.waitFor);
      if (!job) await new Promise((r) => setTimeout(r, 20));
    }
    job.waitUntilFinished(qe, 20000).then(
      (value) => out({ ev: 'finished', value }),
      (err) => out({ ev: 'finished-error', reason: err.message }),
    );
  }
});

process.stdin.resume();
process.stdin.on('end', async () => {
  await qe.close();
  process.exit(0);
});
