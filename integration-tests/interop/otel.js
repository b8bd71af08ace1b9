// BullMQ Node with its OpenTelemetry add-on (bullmq-otel) and an in-memory
// span exporter, for EchoMQ's trace-propagation interop tests.
// Usage: node otel.js <command> <redis-url> <queue> [json-args]
//   add  {name, data}   adds one job with telemetry on; prints {id, spans}
//   work {count}        processes `count` jobs with telemetry on, then prints {spans}
//   fail {count, reason} as work, but every job throws Error(reason) (no retries)
//   export-prometheus {globals}  prints {text: queue.exportPrometheusMetrics(globals)}
// Spans are printed as {name, kind, traceId, spanId, parentSpanId, attributes,
// events: [{name, attributes}]}.
'use strict';
const api = require('@opentelemetry/api');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} = require('@opentelemetry/sdk-trace-base');
const { BullMQOtel } = require('bullmq-otel');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const [command, url, queueName, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};

const exporter = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
);
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());

const spans = () => exporter.getFinishedSpans().map((s) => ({
  name: s.name,
  kind: s.kind,
  traceId: s.spanContext().traceId,
  spanId: s.spanContext().spanId,
  parentSpanId: s.parentSpanContext ? s.parentSpanContext.spanId : null,
  attributes: s.attributes,
  events: s.events.map((e) => ({ name: e.name, attributes: e.attributes || {} })),
}));

async function main() {
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const telemetry = new BullMQOtel({ tracerName: 'echomq-interop' });
  try {
    switch (command) {
      case 'add': {
        const queue = new Queue(queueName, { connection, prefix: 'emq', telemetry });
        const job = await queue.add(args.name, args.data || {});
        await queue.close();
        return { id: job.id, spans: spans() };
      }
      case 'work': {
        let left = args.count || 1;
        let finished;
        const done = new Promise((resolve) => { finished = resolve; });
        const worker = new Worker(queueName, async () => 'ok', {
          connection, prefix: 'emq', telemetry, drainDelay: 1,
        });
        worker.on('completed', () => { left -= 1; if (left === 0) finished(); });
        await done;
        await worker.close();
        return { spans: spans() };
      }
      case 'fail': {
        let left = args.count || 1;
        let finished;
        const done = new Promise((resolve) => { finished = resolve; });
        const worker = new Worker(queueName, async () => { throw new Error(args.reason); }, {
          connection, prefix: 'emq', telemetry, drainDelay: 1,
        });
        worker.on('failed', () => { left -= 1; if (left === 0) finished(); });
        await done;
        await worker.close();
        return { spans: spans() };
      }
      case 'export-prometheus': {
        const queue = new Queue(queueName, { connection, prefix: 'emq' });
        const text = await queue.exportPrometheusMetrics(args.globals);
        await queue.close();
        return { text };
      }
      default:
        throw new Error(`unknown command ${command}`);
    }
  } finally {
    connection.disconnect();
  }
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out)); process.exit(0); },
  (err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1); },
);
