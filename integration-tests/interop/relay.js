// BullMQ's Relay (prefix `emq`) for EchoMQ's relay interop tests.
//
// One-shot: node relay.js <command> <redis-url> <namespace> <json-args>
//   publish        {topic, data, retain?}  -> {mid, nodes, endpoints}
//   deleteRetained {topic}                 -> {deleted}
//   show           {}                      -> {counts, nodes, subscriptions, patterns, retained, namespaces}
//   ops            {ops: [...]}            -> [result per op]: BullMQ's RedisRelayBackend
//                  called op by op (one call per relay script), for the keyspace comparison;
//                  `cursorFrom: i` takes the cursor that op i returned.
// Node: node relay.js <redis-url> <namespace> <json-options>
//   options {nodeId, name, lease, heartbeat, sweep, block, subscribe: [patterns]}
//   prints {"ev":"ready","nodeId"} once subscribed, then {"ev":"msg",pattern,topic,mid,data,retained}
//   per message and {"ev":"swept",ids}, {"ev":"recovered"}, {"ev":"lag",backlog},
//   {"ev":"error",message}. Closes the relay (unregistering the node) when stdin closes.
'use strict';
const { Relay, RedisRelayBackend } = require('bullmq');
const IORedis = require('ioredis');

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const connect = (url) => new IORedis(url, { maxRetriesPerRequest: null });

async function oneShot(command, url, namespace, args) {
  if (command === 'ops') return runOps(url, namespace, args);
  const relay = new Relay({ connection: connect(url), prefix: 'emq', namespace });
  await relay.waitUntilReady();
  let result;
  if (command === 'publish') {
    result = await relay.publish(args.topic, args.data, args.retain ? { retain: args.retain } : {});
  } else if (command === 'deleteRetained') {
    result = { deleted: await relay.deleteRetained(args.topic) };
  } else if (command === 'show') {
    result = {
      counts: await relay.getCounts(),
      nodes: await relay.getNodes(),
      subscriptions: await relay.getSubscriptions(),
      patterns: await relay.getPatterns(),
      retained: await relay.getRetained(),
      namespaces: await relay.getNamespaces(),
    };
  } else {
    throw new Error(`unknown command ${command}`);
  }
  await relay.close();
  return result;
}

// Each op as the backend does it; a RelayError becomes {error: code}.
async function runOps(url, namespace, { ops, inboxMaxLength }) {
  const backend = new RedisRelayBackend({
    connection: connect(url), prefix: 'emq', namespace, inboxMaxLength,
  });
  await backend.waitUntilReady();
  const client = await backend.connection.client;
  const results = [];
  for (const op of ops) {
    // A cursor an earlier op returned (ids differ between servers).
    if (op.cursorFrom !== undefined) op.cursor = results[op.cursorFrom].cursor;
    try {
      results.push(await runOp(backend, client, namespace, op));
    } catch (err) {
      if (typeof err.code !== 'number') throw err;
      results.push({ error: err.code });
    }
  }
  // Registry touches are fired without waiting: let the last one land.
  while (backend.namespaceTouch) await backend.namespaceTouch.catch(() => undefined);
  await backend.close();
  return results;
}

async function runOp(b, client, namespace, op) {
  switch (op.op) {
    case 'register': await b.registerNode(op.node, op.lease, op.info, op.max); return 'ok';
    case 'heartbeat': return b.heartbeat(op.node, op.lease);
    case 'unregister': return b.unregisterNode(op.node);
    case 'sweep': return b.sweep(op.limit);
    case 'subscribe': return b.subscribe(op.node, op.endpoint, op.pattern);
    case 'removeEndpoint': return b.removeEndpoint(op.node, op.endpoint);
    case 'publish':
      return b.publish(op.topic, op.data, { ts: op.ts, retainMs: op.retain, maxSize: op.maxSize });
    case 'deleteRetained': return b.deleteRetained(op.topic);
    case 'read': return b.readInbox(op.node, op.cursor, { blockMs: 0, count: op.count });
    case 'trim': return b.trimInbox(op.node, op.cursor, op.max);
    case 'ack': {
      const base = `emq::relay:{${namespace}}`;
      const { version } = require('bullmq/dist/cjs/version');
      return client.runCommand(`relayAckInbox:${version}`, [`${base}:nodes`, base, op.node, op.cursor]);
    }
    case 'counts': return b.getCounts();
    case 'nodes': return b.getNodes(op.start, op.end);
    case 'subscriptions': return b.getSubscriptions(op.filter, op.start, op.end);
    case 'patterns': return b.getPatterns(op.start, op.end);
    case 'retained': return b.getRetained(op.start, op.end);
    case 'namespaces': return b.getNamespaces();
    case 'waitGone': {
      const key = `emq::relay:{${namespace}}:${op.node}:node`;
      while ((await client.exists(key)) === 1) await new Promise((r) => setTimeout(r, 5));
      return 'gone';
    }
    default: throw new Error(`unknown op ${op.op}`);
  }
}

async function node(url, namespace, opts) {
  const relay = new Relay({
    connection: connect(url),
    prefix: 'emq',
    namespace,
    nodeId: opts.nodeId,
    name: opts.name,
    leaseDuration: opts.lease,
    heartbeatInterval: opts.heartbeat,
    sweepInterval: opts.sweep,
    blockTimeout: opts.block,
  });
  relay.on('error', (err) => out({ ev: 'error', message: String(err && err.message) }));
  relay.on('swept', (ids) => out({ ev: 'swept', ids }));
  relay.on('recovered', () => out({ ev: 'recovered' }));
  relay.on('lag', (backlog) => out({ ev: 'lag', backlog }));
  await relay.waitUntilReady();
  for (const pattern of opts.subscribe || []) {
    await relay.subscribe(pattern, (m) => out({
      ev: 'msg', pattern, topic: m.topic, mid: m.mid, data: m.data, retained: m.retained,
    }));
  }
  out({ ev: 'ready', nodeId: relay.nodeId });
  process.stdin.resume();
  process.stdin.on('end', async () => {
    await relay.close();
    process.exit(0);
  });
}

const argv = process.argv.slice(2);
if (/^rediss?:\/\//.test(argv[0])) {
  node(argv[0], argv[1], argv[2] ? JSON.parse(argv[2]) : {}).catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else {
  const [command, url, namespace, raw] = argv;
  oneShot(command, url, namespace, raw ? JSON.parse(raw) : {}).then(
    (r) => { out(r); process.exit(0); },
    (err) => { console.error(err); process.exit(1); },
  );
}
