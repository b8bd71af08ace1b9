// Drives the real BullMQ Node client (prefix `emq`) for EchoMQ's interop tests.
// Usage: node driver.js <command> <redis-url> <queue> [json-args]
// Prints one JSON document on stdout; errors go to stderr with a non-zero exit.
'use strict';
const need = require('./pkg');
const { Queue, Worker, Job, FlowProducer } = need('bullmq');
const IORedis = need('ioredis');
// The key prefix: `emq`, or EMQ_PREFIX (the adoption tests use BullMQ's default `bull`).
const PREFIX = process.env.EMQ_PREFIX || 'emq';

const [command, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

// One connection as a BullMQ Node user would make it for `url`:
// `redis-cluster://h:p` is an ioredis Cluster seeded with that node;
// `redis-sentinel://s:p/0?sentinelServiceName=NAME&node=s2:p2` asks those sentinels;
// `rediss://` verifies the server with the PEM CA in INTEROP_TLS_CA (and sends
// the client certificate in INTEROP_TLS_CERT/INTEROP_TLS_KEY when set).
// Any other URL is a plain ioredis connection, as before.
function connect(url) {
  const fs = require('fs');
  const base = { maxRetriesPerRequest: null };
  if (url.startsWith('redis-cluster://')) {
    // Seeds: the URL's host, then any `node=h:p` query parameters (fred's form).
    const [first, query] = url.slice('redis-cluster://'.length).split('?');
    const seeds = [first, ...(query || '').split('&').filter((p) => p.startsWith('node=')).map((p) => p.slice(5))];
    const nodes = seeds.map((hp) => {
      const [host, port] = hp.split(':');
      return { host, port: Number(port) };
    });
    return new IORedis.Cluster(nodes, { redisOptions: base });
  }
  if (url.startsWith('redis-sentinel://')) {
    // fred's form: the first sentinel as host, the others as `node=h:p`, the
    // primary's name as `sentinelServiceName`.
    const [first, query] = url.slice('redis-sentinel://'.length).split('?');
    const params = (query || '').split('&');
    const seeds = [first.split('/')[0], ...params.filter((p) => p.startsWith('node=')).map((p) => p.slice(5))];
    const sentinels = seeds.map((hp) => {
      const [host, port] = hp.split(':');
      return { host, port: Number(port) };
    });
    const name = params.find((p) => p.startsWith('sentinelServiceName=')).slice('sentinelServiceName='.length);
    return new IORedis({ ...base, sentinels, name });
  }
  if (url.startsWith('rediss://') && process.env.INTEROP_TLS_CA) {
    const tls = { ca: fs.readFileSync(process.env.INTEROP_TLS_CA) };
    if (process.env.INTEROP_TLS_CERT) tls.cert = fs.readFileSync(process.env.INTEROP_TLS_CERT);
    if (process.env.INTEROP_TLS_KEY) tls.key = fs.readFileSync(process.env.INTEROP_TLS_KEY);
    return new IORedis(url, { ...base, tls });
  }
  return new IORedis(url, base);
}

async function main() {
  const connection = connect(url);
  const queue = new Queue(queueName, { connection, prefix: PREFIX });
  // A Queue writes its meta (`version`, …) once its client is ready, without
  // being awaited, and not at all if it is closed first: a command that
  // never uses `queue` (`flow`) could end before the write and leave a
  // keyspace without it. Lines that expose the write's promise are waited on.
  await queue.waitUntilReady();
  if (queue.queueMetaInitialized) await queue.queueMetaInitialized;
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
            returnvalue: j.returnvalue, failedReason: j.failedReason, stacktrace: j.stacktrace,
            processedOn: j.processedOn, finishedOn: j.finishedOn, progress: j.progress,
            attemptsStarted: j.attemptsStarted, stalledCounter: j.stalledCounter,
            processedBy: j.processedBy,
          };
        }
        return out;
      }
      case 'counts':
        return await queue.getJobCounts();
      case 'add-jobs': {
        // args.jobs: [{name, data, opts}], added one by one so ids follow the order.
        const ids = [];
        for (const j of args.jobs) ids.push((await queue.add(j.name, j.data, j.opts)).id);
        return ids;
      }
      case 'add-many': {
        // args: {n, name, from}: n plain jobs with data {i}, in addBulk chunks.
        const ids = [];
        for (let k = 0; k < args.n; k += 1000) {
          const chunk = [];
          for (let i = k; i < Math.min(args.n, k + 1000); i++) chunk.push({ name: args.name, data: { i: args.from + i } });
          ids.push(...(await queue.addBulk(chunk)).map((j) => j.id));
        }
        return ids;
      }
      case 'add-bulk':
        return (await queue.addBulk(args.jobs)).map((j) => j.id);
      case 'workers':
        return (await queue.getWorkers()).map((c) => ({ name: c.name, rawname: c.rawname }));
      case 'get-ranges':
        return await queue.getRanges(args.types, args.start, args.end, args.asc);
      case 'ops': {
        // args.ops: [[op, ...params]] run in order, each answering its result
        // or "error"; the Rust twin is `run_rust` in tests/suite/interop_state.rs.
        const results = [];
        for (const [op, ...p] of args.ops) {
          try {
            results.push(await runOp(queue, op, p));
          } catch (err) {
            process.stderr.write(`op ${op}: ${err.message}\n`);
            results.push('error');
          }
        }
        return results;
      }
      case 'get-ranges-many': {
        // args.queries: [{types, start, end, asc}], answered in one process.
        const outs = [];
        for (const q of args.queries) outs.push(await queue.getRanges(q.types, q.start, q.end, q.asc));
        return outs;
      }
      case 'get-jobs':
        return (await queue.getJobs(args.types, args.start, args.end, args.asc)).map((j) => j.id);
      case 'is-finished': {
        const j = await queue.getJob(args.id);
        return j ? { completed: await j.isCompleted(), failed: await j.isFailed() } : null;
      }
      case 'sweep': {
        // Node's own stalled check (the method its worker's timer calls), run
        // args.times times args.gapMs apart, with args.stalledInterval and
        // args.maxStalledCount; returns the ids it recovered.
        const sweeper = new Worker(queueName, null, {
          connection: connect(url), prefix: PREFIX, autorun: false,
          stalledInterval: args.stalledInterval, maxStalledCount: args.maxStalledCount,
        });
        const recovered = [];
        sweeper.on('stalled', (id) => recovered.push(id));
        for (let i = 0; i < args.times; i++) {
          if (i > 0) await new Promise((r) => setTimeout(r, args.gapMs));
          await sweeper.moveStalledJobsToWait();
        }
        await sweeper.close();
        return recovered;
      }
      case 'upsert-scheduler': {
        // args: { id, repeat, template? } exactly as queue.upsertJobScheduler takes them.
        const job = await queue.upsertJobScheduler(args.id, args.repeat, args.template);
        return job ? { id: job.id, delay: job.delay } : null;
      }
      case 'work-for': {
        // Runs a real BullMQ Worker for args.ms and returns the ids it processed,
        // with the time each one started.
        const seen = [];
        const workerConnection = connect(url);
        const worker = new Worker(queueName, async (job) => {
          seen.push({ id: job.id, at: Date.now() });
        }, { connection: workerConnection, prefix: PREFIX, concurrency: 1 });
        await new Promise((r) => setTimeout(r, args.ms));
        await worker.close();
        await workerConnection.quit();
        return seen;
      }
      case 'work-until': {
        // Real BullMQ Workers (args.count of them, default 1, named
        // `${args.name}-${i}` when args.name is given) with Worker options
        // args.opts (concurrency, limiter, …), each job sleeping args.sleepMs,
        // until every id of args.ids was processed by them, at least args.jobs
        // jobs were, and every id of args.finished is completed or failed (by
        // anyone); or until args.deadlineMs passed. Answers {done, seen}: done
        // tells whether the condition held, seen is [{id, start, end}].
        const seen = [];
        const conns = [];
        const workers = [];
        for (let i = 0; i < (args.count || 1); i++) {
          const c = connect(url);
          conns.push(c);
          const name = args.name ? `${args.name}-${i}` : undefined;
          workers.push(new Worker(queueName, async (job) => {
            const start = Date.now();
            if (args.sleepMs) await new Promise((r) => setTimeout(r, args.sleepMs));
            seen.push({ id: job.id, start, end: Date.now() });
          }, { connection: c, prefix: PREFIX, concurrency: 1, name, ...(args.opts || {}) }));
        }
        const mine = args.ids || [];
        const finished = args.finished || [];
        const held = async () => {
          if (seen.length < (args.jobs || 0)) return false;
          if (!mine.every((id) => seen.some((s) => s.id === id))) return false;
          for (const id of finished) {
            const state = await queue.getJobState(id);
            if (state !== 'completed' && state !== 'failed') return false;
          }
          return true;
        };
        const deadline = Date.now() + (args.deadlineMs || 30000);
        let done = await held();
        while (!done && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
          done = await held();
        }
        await Promise.all(workers.map((w) => w.close()));
        conns.forEach((c) => c.disconnect());
        return { done, seen };
      }
      case 'get-scheduler':
        return (await queue.getJobScheduler(args.id)) || null;
      default:
        throw new Error(`unknown command ${command}`);
    }
  } finally {
    await queue.close();
    await connection.quit();
  }
}

async function runOp(queue, op, p) {
  const job = async () => {
    const j = await queue.getJob(p[0]);
    if (!j) throw new Error(`no job ${p[0]}`);
    return j;
  };
  switch (op) {
    case 'add': return (await queue.add(p[0], p[1], p[2])).id;
    case 'promote': await (await job()).promote(); return null;
    case 'change-priority': await (await job()).changePriority({ priority: p[1], lifo: p[2] }); return null;
    case 'change-delay': await (await job()).changeDelay(p[1]); return null;
    case 'remove': return await queue.remove(p[0]);
    case 'drain': await queue.drain(p[0]); return null;
    case 'pause': await queue.pause(); return null;
    case 'resume': await queue.resume(); return null;
    case 'progress': await (await job()).updateProgress(p[1]); return null;
    case 'log': return await Job.addJobLog(queue, p[0], p[1], p[2]);
    case 'update-data': await (await job()).updateData(p[1]); return null;
    case 'retry': await (await job()).retry('failed'); return null;
    case 'clean': return await queue.clean(p[0], p[1], p[2]);
    case 'work':
    case 'work-with': {
      // Processes everything ready with a Node worker (jobs behave as their
      // data says), then closes it; `work-with` takes [workerOpts].
      const { behave } = require('./behave');
      const { UnrecoverableError } = need('bullmq');
      const wconn = connect(url);
      const w = new Worker(queue.name, async (j) => behave(j.data, j.attemptsMade, (x) => j.updateProgress(x), UnrecoverableError), {
        connection: wconn, prefix: PREFIX, drainDelay: 1, ...(op === 'work-with' ? p[0] : {}),
      });
      for (;;) {
        await new Promise((r) => setTimeout(r, 50));
        const c = await queue.getJobCounts('waiting', 'active', 'prioritized');
        if (c.waiting + c.active + c.prioritized === 0) break;
      }
      await w.close();
      wconn.disconnect();
      return null;
    }
    case 'obliterate': await queue.obliterate({ force: p[0] }); return null;
    case 'retry-jobs': await queue.retryJobs({ count: p[0], state: p[1], timestamp: p[2] }); return null;
    case 'promote-jobs': await queue.promoteJobs({ count: p[0] }); return null;
    case 'flow': {
      // [parentName, parentData, [{name, data, opts}], parentOpts]: a parent
      // and its children, all in this queue.
      const fconn = new IORedis(url, { maxRetriesPerRequest: null });
      const flow = new FlowProducer({ connection: fconn, prefix: PREFIX });
      const children = p[2].map((c) => ({ ...c, queueName: queue.name }));
      const tree = await flow.add({ name: p[0], data: p[1], queueName: queue.name, children, opts: p[3] });
      await flow.close();
      fconn.disconnect();
      return tree.job.id;
    }
    case 'redis': {
      // A raw command, to set up states no client call makes.
      const r = new IORedis(url, { maxRetriesPerRequest: null });
      try { return await r.call(...p); } finally { r.disconnect(); }
    }
    default: return await parityOp(queue, op, p);
  }
}

main().then(
  // Exit once the answer is flushed: a connection a command forgot to close
  // must not keep the test waiting.
  (out) => { process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0)); },
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);

// ---------------------------------------------------------------------------
// Issue 16 (BullMQ parity) ops, reached from `ops` through runOp's default:
// deduplication, global limits, rate limiting, getters. Twins of the Rust
// calls in tests/interop_parity.rs.
async function parityOp(queue, op, p) {
  const job = async () => {
    const j = await queue.getJob(p[0]);
    if (!j) throw new Error(`no job ${p[0]}`);
    return j;
  };
  switch (op) {
    case 'dedup-job-id': return await queue.getDeduplicationJobId(p[0]);
    case 'remove-dedup-key': return await queue.removeDeduplicationKey(p[0]);
    case 'job-remove-dedup-key': return await (await job()).removeDeduplicationKey();
    case 'set-global-concurrency': await queue.setGlobalConcurrency(p[0]); return null;
    case 'get-global-concurrency': return await queue.getGlobalConcurrency();
    case 'remove-global-concurrency': await queue.removeGlobalConcurrency(); return null;
    case 'set-global-rate-limit': await queue.setGlobalRateLimit(p[0], p[1]); return null;
    case 'get-global-rate-limit': return await queue.getGlobalRateLimit();
    case 'remove-global-rate-limit': await queue.removeGlobalRateLimit(); return null;
    case 'is-maxed': return await queue.isMaxed();
    case 'rate-limit-ttl': return await queue.getRateLimitTtl(p[0]);
    case 'rate-limit': await queue.rateLimit(p[0]); return null;
    case 'counts-per-priority': return await queue.getCountsPerPriority(p[0]);
    case 'job-logs': return await queue.getJobLogs(p[0], p[1], p[2], p[3]);
    case 'job-state': return await queue.getJobState(p[0]);
    case 'take-and-move-to-wait': {
      // [token, rateLimitMs]: takes the next job by hand (getNextJob), sets
      // the queue's rate limit (unless 0), and puts the job back with job.moveToWait
      // (moveJobFromActiveToWait); answers {id, pttl}.
      const c = new IORedis(url, { maxRetriesPerRequest: null });
      const w = new Worker(queue.name, null, { connection: c, prefix: PREFIX, autorun: false });
      try {
        const j = await w.getNextJob(p[0], { block: false });
        if (!j) throw new Error('no job to take');
        if (p[1] > 0) await queue.rateLimit(p[1]);
        const pttl = await j.moveToWait(p[0]);
        return { id: j.id, pttl };
      } finally {
        await w.close();
        c.disconnect();
      }
    }
    case 'work-timed': {
      // [ms, workerOpts, sleepMs]: real BullMQ workers (workerOpts.count of
      // them, default 1) with workerOpts (limiter, concurrency) for ms; each
      // job sleeps sleepMs; answers [{id, start, end}] per processed job.
      const seen = [];
      const conns = [];
      const workers = [];
      for (let i = 0; i < (p[1].count || 1); i++) {
        const c = new IORedis(url, { maxRetriesPerRequest: null });
        conns.push(c);
        const { count, ...opts } = p[1];
        workers.push(new Worker(queue.name, async (j) => {
          const start = Date.now();
          await new Promise((r) => setTimeout(r, p[2] || 0));
          seen.push({ id: j.id, start, end: Date.now() });
        }, { connection: c, prefix: PREFIX, ...opts }));
      }
      await new Promise((r) => setTimeout(r, p[0]));
      await Promise.all(workers.map((w) => w.close()));
      conns.forEach((c) => c.disconnect());
      return seen;
    }
    default: return await bullmq67Op(queue, op, p);
  }
}

// ---------------------------------------------------------------------------
// Issue 29 (BullMQ 6.7.0) ops, reached from parityOp's default. Twins of the
// Rust calls in tests/suite/interop_bullmq67.rs.
async function bullmq67Op(queue, op, p) {
  switch (op) {
    // [id]: the job goes, its children stay (pointing at a parent that is gone).
    case 'remove-keep-children': return await queue.remove(p[0], { removeChildren: false });
    // [id, state]: job.retry(state).
    case 'retry-state': {
      const j = await queue.getJob(p[0]);
      if (!j) throw new Error(`no job ${p[0]}`);
      await j.retry(p[1]);
      return null;
    }
    // [timestamp?]: getDelayedCount, only jobs due strictly before it when given.
    case 'delayed-count': return await queue.getDelayedCount(p[0] === null ? undefined : p[0]);
    // [token, limiter]: one getNextJob by a worker with that rate limiter; the id taken.
    case 'take-limited': {
      const c = connect(url);
      const w = new Worker(queue.name, null, { connection: c, prefix: PREFIX, autorun: false, limiter: p[1] });
      try {
        const j = await w.getNextJob(p[0], { block: false });
        return j ? j.id : null;
      } finally {
        await w.close();
        c.disconnect();
      }
    }
    default: throw new Error(`unknown op ${op}`);
  }
}
