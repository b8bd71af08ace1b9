// Shows an EchoMQ queue through bull-board's own API (@bull-board/api with
// its BullMQAdapter over BullMQ Node, prefix emq), as a bull-board server
// would serve it, without starting a server: a recording server adapter
// keeps the routes bull-board registers and the script calls them.
//
// Usage: node bullboard.js <redis-url> <queue> <job-id>
// Prints {queue: {name, counts, isPaused, jobs}, job} as JSON.
'use strict';
const { createBullBoard } = require('@bull-board/api');
const { BullMQAdapter } = require('@bull-board/api/bullMQAdapter');
const { Queue } = require('bullmq');
const IORedis = require('ioredis');

const [url, queueName, jobId] = process.argv.slice(2);

// The part of bull-board's server adapter interface the board calls.
class RecordingAdapter {
  setQueues(queues) { this.queues = queues; return this; }
  setViewsPath() { return this; }
  setStaticPath() { return this; }
  setUIConfig(config) { this.uiConfig = config; return this; }
  setEntryRoute() { return this; }
  setErrorHandler() { return this; }
  setApiRoutes(routes) { this.routes = routes; return this; }
  route(method, path) {
    const match = (r) => (Array.isArray(r.route) ? r.route : [r.route]).includes(path)
      && (Array.isArray(r.method) ? r.method : [r.method]).includes(method);
    const found = this.routes.find(match);
    if (!found) throw new Error(`bull-board has no route ${method} ${path}`);
    return found.handler;
  }
}

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'emq' });
  const adapter = new RecordingAdapter();
  createBullBoard({ queues: [new BullMQAdapter(queue)], serverAdapter: adapter });
  const request = (query, params) => ({
    queues: adapter.queues, uiConfig: adapter.uiConfig, query, params, body: {}, headers: {},
  });
  try {
    const list = await adapter.route('get', '/api/queues')(
      request({ activeQueue: queueName, status: 'latest', page: '1', jobsPerPage: '50' }, {}),
    );
    if (list.status && list.status !== 200) throw new Error('GET /api/queues: ' + JSON.stringify(list.body));
    const q = list.body.queues.find((x) => x.name === queueName);
    if (!q) throw new Error(`bull-board does not list ${queueName}`);
    const one = await adapter.route('get', '/api/queues/:queueName/:jobId')(
      request({}, { queueName, jobId }),
    );
    if (one.status && one.status !== 200) throw new Error('GET job: ' + JSON.stringify(one.body));
    process.stdout.write(JSON.stringify({
      queue: {
        name: q.name,
        counts: q.counts,
        isPaused: q.isPaused,
        jobs: q.jobs.map((j) => ({ id: j.id, name: j.name, data: j.data })),
      },
      job: one.body.job,
    }) + '\n');
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

main().catch((err) => {
  process.stderr.write(String(err.stack || err) + '\n');
  process.exit(1);
});
