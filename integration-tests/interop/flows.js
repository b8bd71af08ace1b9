// Flow and metrics commands of the BullMQ Node client for EchoMQ's interop
// tests (kept apart from driver.js, which other suites extend).
// Usage: node flows.js <command> <redis-url> <queue> [json-args]
// Prints one JSON document on stdout; errors go to stderr with a non-zero exit.
'use strict';
const need = require('./pkg');
const { Queue, Worker, FlowProducer, WaitingChildrenError, UnrecoverableError } = need('bullmq');
const IORedis = need('ioredis');
const { behave } = require('./behave');

const [command, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

const conn = () => new IORedis(url, { maxRetriesPerRequest: null });

// A tree of ids in the shape of EchoMQ's JobNode.
function tree(node) {
  return {
    id: node.job.id,
    queue: node.job.queueName,
    name: node.job.name,
    children: (node.children || []).map(tree),
  };
}

async function flowTree(node) {
  const j = node.job;
  return {
    id: j.id,
    name: j.name,
    queue: j.queueName,
    state: await j.getState(),
    returnvalue: j.returnvalue === undefined ? null : j.returnvalue,
    children: await Promise.all((node.children || []).map(flowTree)),
  };
}

// Whether a queue still has work for a worker (or a parent to wake).
async function busy(q) {
  const c = await q.getJobCounts('waiting', 'active', 'prioritized', 'delayed', 'waiting-children');
  return c.waiting + c.active + c.prioritized + c.delayed + c['waiting-children'] > 0;
}

async function main() {
  switch (command) {
    case 'add-flow': {
      // args: {flow} in BullMQ's FlowJob shape.
      const c = conn();
      const fp = new FlowProducer({ connection: c, prefix: 'emq' });
      try { return tree(await fp.add(args.flow)); } finally { await fp.close(); c.disconnect(); }
    }
    case 'add-flows': {
      const c = conn();
      const fp = new FlowProducer({ connection: c, prefix: 'emq' });
      try { return (await fp.addBulk(args.flows)).map(tree); } finally { await fp.close(); c.disconnect(); }
    }
    case 'get-flow': {
      // args: {id, depth?, maxChildren?}
      const c = conn();
      const fp = new FlowProducer({ connection: c, prefix: 'emq' });
      try {
        const opts = { id: args.id, queueName, prefix: 'emq' };
        if (args.depth !== undefined) opts.depth = args.depth;
        if (args.maxChildren !== undefined) opts.maxChildren = args.maxChildren;
        const node = await fp.getFlow(opts);
        return node ? await flowTree(node) : null;
      } finally { await fp.close(); c.disconnect(); }
    }
    case 'work': {
      // args: {queues, idleMs?, limitMs?, metrics?, waitChildren?}: one Node
      // worker per queue, jobs behave as their data says; records each run
      // with what the job saw of its children. With data.spawn {queue, name,
      // data} a job adds that child to itself the first time it runs and
      // waits for it (WaitingChildrenError), then returns its children's values.
      const seen = [];
      const conns = [];
      const workers = [];
      const queues = [];
      for (const name of args.queues) {
        const wc = conn();
        conns.push(wc);
        const q = new Queue(name, { connection: wc, prefix: 'emq' });
        queues.push(q);
        const opts = { connection: wc, prefix: 'emq', drainDelay: 1, concurrency: 4 };
        if (args.metrics) opts.metrics = { maxDataPoints: args.metrics };
        workers.push(new Worker(name, async (job, token) => {
          const children = await job.getChildrenValues();
          const ignored = await job.getIgnoredChildrenFailures();
          const counts = await job.getDependenciesCount();
          seen.push({ queue: name, id: job.id, name: job.name, attempt: job.attemptsMade, children, ignored, counts });
          const d = job.data || {};
          if (d.spawn && job.data.step !== 'waiting') {
            const c = new Queue(d.spawn.queue, { connection: wc, prefix: 'emq' });
            await c.add(d.spawn.name, d.spawn.data, { parent: { id: job.id, queue: job.queueQualifiedName } });
            await job.updateData({ ...d, step: 'waiting' });
            if (await job.moveToWaitingChildren(token)) throw new WaitingChildrenError();
            // The child finished before the parent could park (BullMQ answers
            // false): the job carries on now, seeing what a resumed run sees.
            const now = await job.getChildrenValues();
            seen.push({ queue: name, id: job.id, name: job.name, attempt: job.attemptsMade, children: now,
              ignored: await job.getIgnoredChildrenFailures(), counts: await job.getDependenciesCount() });
            return { children: now };
          }
          if (d.spawn) return { children };
          return behave(d, job.attemptsMade, (x) => job.updateProgress(x), UnrecoverableError);
        }, opts));
      }
      const start = Date.now();
      let idleSince = null;
      for (;;) {
        await new Promise((r) => setTimeout(r, 50));
        let any = false;
        for (const q of queues) if (await busy(q)) any = true;
        if (any) idleSince = null; else if (idleSince === null) idleSince = Date.now();
        if (idleSince !== null && Date.now() - idleSince >= (args.idleMs || 300)) break;
        if (Date.now() - start > (args.limitMs || 15000)) break;
      }
      await Promise.all(workers.map((w) => w.close()));
      await Promise.all(queues.map((q) => q.close()));
      conns.forEach((c) => c.disconnect());
      return seen;
    }
    case 'metrics': {
      // args: {type, start?, end?}
      const c = conn();
      const q = new Queue(queueName, { connection: c, prefix: 'emq' });
      try { return await q.getMetrics(args.type, args.start || 0, args.end === undefined ? -1 : args.end); } finally { await q.close(); c.disconnect(); }
    }
    case 'remove-ops': {
      // args: {ops: [[queue, 'remove', id, removeChildren] | [queue, 'obliterate']]}
      const c = conn();
      const out = [];
      try {
        for (const [name, op, id, removeChildren] of args.ops) {
          const q = new Queue(name, { connection: c, prefix: 'emq' });
          if (op === 'remove') out.push(await q.remove(id, { removeChildren }));
          else { await q.obliterate({ force: true }); out.push(null); }
          await q.close();
        }
        return out;
      } finally { c.disconnect(); }
    }
    default:
      throw new Error(`unknown command ${command}`);
  }
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out === undefined ? null : out) + '\n', () => process.exit(0)); },
  (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); },
);
