// A BullMQ Node QueueEvents (prefix `emq`) for EchoMQ's interop tests.
// Usage: node events.js <redis-url> <queue> <json-options>
// Options: waitFor (a job id: also prints {"ev":"finished","value"} or
// {"ev":"finished-error","reason"} from job.waitUntilFinished).
// Reads from the stream's last entry at its start. Prints {"ev":"ready"}
// once listening, then one line per event as Node delivers it:
// {"ev":"event","name","args","id"} (id: the stream entry's). Exits when
// stdin closes.
'use strict';
const need = require('./pkg');
const { QueueEvents, Queue, Job } = need('bullmq');
const IORedis = need('ioredis');

const [url, queueName, rawOpts] = process.argv.slice(2);
const opts = rawOpts ? JSON.parse(rawOpts) : {};
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

let closeWith = null;
const keyPrefix = `emq:${queueName}`;
const names = ['added', 'waiting', 'active', 'progress', 'completed', 'failed', 'delayed',
  'retries-exhausted', 'stalled', 'drained', 'removed', 'paused', 'resumed', 'duplicated'];

async function start() {
  // Read from the stream's last entry as it is now: every event written
  // after `ready` is delivered, however long the first XREAD takes to block.
  const probe = new IORedis(url, { maxRetriesPerRequest: null });
  const last = await probe.xrevrange(`${keyPrefix}:events`, '+', '-', 'COUNT', 1);
  probe.disconnect();
  const qe = new QueueEvents(queueName, {
    connection: new IORedis(url, { maxRetriesPerRequest: null }), prefix: 'emq',
    lastEventId: last.length ? last[0][0] : '0-0',
  });
  // Node hands `drained` its id alone, every other event (args, id).
  for (const name of names) {
    qe.on(name, (a, b) => out(name === 'drained'
      ? { ev: 'event', name, args: {}, id: a }
      : { ev: 'event', name, args: a, id: b }));
  }
  await qe.waitUntilReady();
  return qe;
}

start().then(async (qe) => {
  closeWith = qe;
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
  if (closeWith) await closeWith.close();
  process.exit(0);
});
