// Drives BullMQ Node through the payload codec shim (shims/node/emq-codec.js)
// for EchoMQ's codec tests. Usage: node codec.js <command> <redis-url> <queue> [json-args]
// The keys come from ECHOMQ_CODEC_KEYS, as a user's would. Prints one JSON document.
//   add   {codec, jobs: [{name, data, opts}]}: Queue.addBulk through the shim; the ids.
//   work  {codec, count, timeoutMs, maxDecodedBytes}: a Worker through the shim until
//         `count` jobs finished (completed, or failed for good); per id what its
//         processor saw ({text: JSON.stringify(job.data)} or {len} with `short`), and
//         the failures {reason, attemptsMade}, and `ms` from the first job's start to the
//         count-th finish.
// Both take `offloadDir` and `threshold` (payloads over it to files under the dir),
// and `work` takes `returnPad` (a return value padded with that many bytes).
'use strict';
const need = require('./pkg');
const { Queue, Worker } = need('bullmq');
const IORedis = need('ioredis');
const { createCodec } = require('../../shims/node/emq-codec');

const [command, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const offload = args.offloadDir ? { dir: args.offloadDir, threshold: args.threshold } : null;
  const codec = createCodec({ codec: args.codec || null, maxDecodedBytes: args.maxDecodedBytes, offload });
  try {
    if (command === 'add') {
      const queue = new Queue(queueName, { connection, prefix: 'emq' });
      const jobs = await codec.addBulk(queue, args.jobs);
      await queue.close();
      return jobs.map((j) => j.id);
    }
    if (command === 'work') {
      const seen = {};
      const failed = {};
      let finished = 0;
      let done;
      const all = new Promise((resolve) => { done = resolve; });
      // Timed from the first job the processor runs to the count-th finish:
      // the process's start and its connections are not part of a read rate.
      let firstAt = null;
      let lastAt = null;
      const tick = () => {
        if (++finished === args.count) lastAt = process.hrtime.bigint();
        if (finished >= args.count) done();
      };
      const worker = new Worker(queueName, codec.processor(async (job) => {
        if (firstAt === null) firstAt = process.hrtime.bigint();
        const text = JSON.stringify(job.data);
        seen[job.id] = args.short ? { len: Buffer.byteLength(text) } : { text };
        const out = { seenBy: 'node', len: Buffer.byteLength(text) };
        if (args.returnPad) out.pad = 'n'.repeat(args.returnPad);
        return out;
      }), { connection, prefix: 'emq', concurrency: args.concurrency || 1, drainDelay: 1 });
      worker.on('completed', tick);
      worker.on('failed', (job, err) => {
        failed[job.id] = { reason: err.message, name: err.name, attemptsMade: job.attemptsMade };
        if (err.name === 'UnrecoverableError' || job.attemptsMade >= (job.opts.attempts || 1)) tick();
      });
      const timer = setTimeout(done, args.timeoutMs || 30000);
      await all;
      clearTimeout(timer);
      await worker.close();
      const ms = firstAt !== null && lastAt !== null ? Number(lastAt - firstAt) / 1e6 : null;
      return { done: finished >= args.count, seen, failed, ms };
    }
    throw new Error(`unknown command ${command}`);
  } finally {
    await connection.quit();
  }
}

main().then(
  // Exit once the whole document is written: a pipe takes it in pieces.
  (out) => { process.stdout.write(JSON.stringify(out), () => process.exit(0)); },
  (e) => { console.error(e); process.exit(1); },
);
