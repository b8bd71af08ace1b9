// A long-running BullMQ Node worker (prefix `emq`) for EchoMQ's interop tests.
// Usage: node worker.js <redis-url> <queue> <json-options>
// Options: prefix (default emq), concurrency, name, lockDuration, stalledInterval, maxStalledCount,
// drainDelay, verbose (one line per job start), hang (processors never return),
// skipStalledCheck, sweepOnly (take no job: only run Node's stalled check every
// stalledInterval, printing {"ev":"stalled","id"} per recovered job).
// Prints JSON lines on stdout: {"ev":"ready"} once running, {"ev":"start","id"}
// per job when verbose, and {"ev":"summary","runs":{id:count}} after a clean
// close, which happens when stdin is closed. The test may SIGKILL it instead.
'use strict';
const need = require('./pkg');
const { Worker, UnrecoverableError } = need('bullmq');
const IORedis = need('ioredis');
const { behave } = require('./behave');

const [url, queueName, rawOpts] = process.argv.slice(2);
const opts = rawOpts ? JSON.parse(rawOpts) : {};
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const runs = {};
const connection = new IORedis(url, { maxRetriesPerRequest: null });
const worker = new Worker(queueName, async (job) => {
  runs[job.id] = (runs[job.id] || 0) + 1;
  if (opts.verbose) out({ ev: 'start', id: job.id, atm: job.attemptsMade });
  if (opts.hang) await new Promise(() => {});
  return behave(job.data, job.attemptsMade, async (p) => job.updateProgress(p), UnrecoverableError);
}, {
  connection,
  prefix: opts.prefix || 'emq',
  concurrency: opts.concurrency || 1,
  name: opts.name,
  lockDuration: opts.lockDuration || 30000,
  stalledInterval: opts.stalledInterval || 30000,
  maxStalledCount: opts.maxStalledCount === undefined ? 1 : opts.maxStalledCount,
  drainDelay: opts.drainDelay || 1,
  skipStalledCheck: !!opts.skipStalledCheck,
  autorun: false,
});
worker.on('stalled', (id) => out({ ev: 'stalled', id }));
worker.on('failed', (job, err) => {
  if (opts.verbose && job) out({ ev: 'failed', id: job.id, reason: err.message });
});
worker.on('error', (err) => {
  process.stderr.write(`worker error: ${err}\n`);
  out({ ev: 'error', message: String((err && err.message) || err) });
});

let sweeping = null;
worker.waitUntilReady().then(async () => {
  if (opts.sweepOnly) {
    // The method Node's own stalled-check timer calls, on the same schedule.
    await worker.moveStalledJobsToWait();
    sweeping = setInterval(() => worker.moveStalledJobsToWait().catch(
      (err) => process.stderr.write(`sweep error: ${err}\n`)), worker.opts.stalledInterval);
  } else {
    worker.run();
  }
  out({ ev: 'ready' });
});

process.stdin.resume();
process.stdin.on('end', async () => {
  if (sweeping) clearInterval(sweeping);
  await worker.close();
  out({ ev: 'summary', runs });
  process.exit(0);
});
