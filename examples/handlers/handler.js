#!/usr/bin/env node
// An EchoMQ job handler in Node.js, no packages:
//
//   echomq work mail --processor exec:'node examples/handlers/handler.js' --concurrency 4
//
// One job per JSON line on stdin; progress/log lines and then one
// completed/failed line on stdout (docs/processors.md). console.error goes to
// the worker's log with the job's id.
'use strict';
const readline = require('readline');

const send = (message) => process.stdout.write(JSON.stringify(message) + '\n');

async function handle(job) {
  send({ type: 'log', line: `job ${job.id} attempt ${job.attempt}` });
  send({ type: 'progress', value: 50 });
  if (job.data && job.data.fail) {
    const err = new Error(job.data.fail);
    err.unrecoverable = Boolean(job.data.unrecoverable);
    throw err;
  }
  console.error(`handled ${job.name} ${job.id}`);
  return { handled: job.name, echo: job.data };
}

async function main() {
  // Jobs come one at a time: the next arrives only after this one's answer.
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const job = JSON.parse(line);
    if (job.type !== 'job') continue;
    try {
      send({ type: 'completed', value: await handle(job) });
    } catch (err) {
      send({ type: 'failed', error: err.message, unrecoverable: Boolean(err.unrecoverable), stack: err.stack });
    }
  }
}

main();
