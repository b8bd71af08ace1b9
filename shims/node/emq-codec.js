// EchoMQ payload codecs for BullMQ Node: job data and return values stored
// compressed (gzip) or sealed (AES-256-GCM over gzip, with key ids) in the
// JSON envelope of docs/protocol.md §Payload envelope. Node's standard
// library only (zlib, crypto); CommonJS.
//
//   const { createCodec } = require('./emq-codec');
//   const codec = createCodec({ codec: 'gzip' });          // keys: ECHOMQ_CODEC_KEYS
//   await codec.add(queue, 'name', data, opts);            // Queue.add, encoded
//   await codec.addBulk(queue, [{ name, data, opts }]);    // Queue.addBulk, encoded
//   new Worker(name, codec.processor(async (job) => ...)); // job.data decoded, result encoded
//
// Offload (docs/operations.md §Memory): with `offload: { dir, threshold }`,
// payloads over the threshold (as stored) go to a file under `dir` and the
// job keeps a reference envelope; the processor reads references from `dir`
// or through `offload.loadBlob(ref)` (e.g. an S3 GetObject), checking the
// length and SHA-256. Blobs are tracked in Redis as EchoMQ's runtime tracks
// them, so `echomq blobs` / `echomq work --offload` sweep the unused ones.
//
// A payload that cannot be decoded (unknown codec, missing or wrong key,
// tampered envelope, corrupt data, over the size cap) throws an error named
// UnrecoverableError, which BullMQ fails for good without retrying.
'use strict';
const zlib = require('zlib');
const crypto = require('crypto');

const CODEC_FIELD = 'emq:codec';
const VERSION = 1;
const GZIP = 'gzip';
const SEALED = 'aes256gcm+gzip';
const BLOB = 'blob';
const DEFAULT_OFFLOAD_THRESHOLD = 256 * 1024;
const fs = require('fs');
const path = require('path');
const DEFAULT_MAX_DECODED_BYTES = 512 * 1024 * 1024;
// Under gzip, shorter JSON texts are stored plain: the envelope would not be
// smaller, and a gzipSync per small return value cost the worker a deflate
// state each (docs/protocol.md §Payload envelope; the Rust GZIP_MIN_BYTES).
const GZIP_MIN_BYTES = 256;
const NON_ASCII_TEST = /[^\x00-\x7f]/;
const NON_ASCII = /[^\x00-\x7f]/g;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A payload that cannot be decoded or encoded: BullMQ does not retry it. */
class CodecError extends Error {
  constructor(message) {
    super(message);
    // BullMQ recognises an unrecoverable failure by this name too.
    this.name = 'UnrecoverableError';
  }
}

/** Keys from `id:base64` entries separated by commas or newlines; the last is current. */
function parseKeys(spec) {
  const keys = new Map();
  let current = null;
  for (const raw of String(spec || '').split(/[,\n]/)) {
    const entry = raw.trim();
    if (!entry || entry.startsWith('#')) continue;
    const at = entry.indexOf(':');
    if (at <= 0) throw new CodecError('invalid codec key: an entry is not id:base64');
    const id = entry.slice(0, at).trim();
    const key = Buffer.from(entry.slice(at + 1).trim(), 'base64');
    if (key.length !== 32) throw new CodecError(`invalid codec key: key "${id}": ${key.length} bytes, AES-256 needs 32`);
    keys.set(id, key);
    current = id;
  }
  return { keys, current };
}

function isEnvelope(data) {
  return data !== null && typeof data === 'object' && !Array.isArray(data) && CODEC_FIELD in data;
}

function aad(codec, kid) {
  return Buffer.from(`${codec}:${VERSION}:${kid}`, 'utf8');
}

/** Whether a JSON text is stored as it is under `name` (never one naming the codec field). */
function staysPlain(name, text) {
  return name === GZIP && text.length < GZIP_MIN_BYTES && Buffer.byteLength(text, 'utf8') < GZIP_MIN_BYTES
    && !text.includes(CODEC_FIELD);
}

/** The bytes strict base64 of `text` decodes to; Node's decoder skips bad characters, so fewer means bad input. */
function decodedLength(text) {
  const pad = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return (text.length / 4) * 3 - pad;
}

/**
 * `text` with every character past ASCII as a \u escape (a surrogate pair
 * past U+FFFF, as JavaScript holds it): the same document. A reader decodes
 * an ASCII text as bytes and parses a one-byte string; one non-ASCII
 * character in a 15 KB order sends both steps down their slow path (73 µs
 * per read in a loop against 57 µs; docs/protocol.md §Payload envelope).
 */
function asciiJson(text) {
  if (!NON_ASCII_TEST.test(text)) return text;
  return text.replace(NON_ASCII, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function b64field(env, field) {
  const text = env[field];
  if (typeof text !== 'string') throw new CodecError(`malformed payload envelope: ${field} is missing or not a string`);
  // A length check instead of a regular expression over the text: it cost the
  // worker about 10 µs per 15 KB job.
  const bytes = Buffer.from(text, 'base64');
  if (text.length % 4 !== 0 || bytes.length !== decodedLength(text)) {
    throw new CodecError(`corrupt base64 in the payload envelope field "${field}"`);
  }
  return bytes;
}

/**
 * A codec: `options.codec` ('gzip', 'aes256gcm+gzip' or null: plain JSON),
 * `options.keys` (an `id:base64,…` string; default ECHOMQ_CODEC_KEYS),
 * `options.current` (the sealing key id; default the last one),
 * `options.maxDecodedBytes` (default 512 MiB).
 */
function createCodec(options = {}) {
  const codec = options.codec || null;
  if (codec !== null && codec !== GZIP && codec !== SEALED) throw new CodecError(`unknown payload codec "${codec}"`);
  const ring = parseKeys(options.keys !== undefined ? options.keys : process.env.ECHOMQ_CODEC_KEYS);
  const current = options.current || ring.current;
  if (current !== null && !ring.keys.has(current)) throw new CodecError(`no key with id "${current}" is configured`);
  const maxDecodedBytes = options.maxDecodedBytes || DEFAULT_MAX_DECODED_BYTES;
  const offload = options.offload || null;
  if (offload && !offload.dir && !offload.loadBlob) throw new CodecError('offload needs a dir or a loadBlob function');
  const threshold = (offload && offload.threshold) || DEFAULT_OFFLOAD_THRESHOLD;

  function blobPath(key) {
    if (!/^[0-9a-f]{32}$/.test(key)) throw new CodecError('malformed payload envelope: key is not a blob key (32 lowercase hex digits)');
    return path.join(offload.dir, key.slice(0, 2), key);
  }

  /** Reads and checks the blob a reference names: the text it holds. */
  async function fetchBlob(ref) {
    if (typeof ref.key !== 'string' || typeof ref.sha256 !== 'string' || typeof ref.len !== 'number') {
      throw new CodecError('malformed payload envelope: a blob reference needs key, len and sha256');
    }
    if (ref.v !== VERSION) throw new CodecError(`unsupported payload envelope version ${ref.v}`);
    if (!offload) throw new CodecError(`the payload is in a ${ref.store} blob store and no offload store is configured`);
    if (ref.len > maxDecodedBytes) throw new CodecError(`payload decompresses to more than ${maxDecodedBytes} bytes (a decompression bomb?)`);
    let bytes;
    if (offload.loadBlob) {
      bytes = await offload.loadBlob(ref);
    } else {
      if (ref.store !== 'dir') throw new CodecError(`the payload is in a ${ref.store} blob store, this codec reads dir`);
      try {
        bytes = await fs.promises.readFile(blobPath(ref.key));
      } catch (e) {
        if (e.code === 'ENOENT') throw new CodecError(`offloaded payload ${ref.key} is missing from the blob store`);
        throw e; // an I/O error may heal: BullMQ retries it by its attempts
      }
    }
    const sum = crypto.createHash('sha256').update(bytes).digest('hex');
    if (bytes.length !== ref.len || sum !== ref.sha256) {
      throw new CodecError(`offloaded payload ${ref.key} does not match its reference (length or SHA-256)`);
    }
    return bytes.toString('utf8');
  }

  /** Writes `text` as a blob tracked under queue keys `base` (`<prefix>:<queue>:`); the reference. */
  async function writeBlob(client, base, text) {
    const key = crypto.randomUUID().replace(/-/g, '');
    // Announced before it is written: a producer dying here leaves a blob the sweep finds.
    await client.zadd(`${base}blobs`, Date.now(), key);
    const file = blobPath(key);
    await fs.promises.mkdir(path.dirname(file), { recursive: true });
    const tmp = path.join(path.dirname(file), `.${key}.tmp`);
    await fs.promises.writeFile(tmp, text);
    await fs.promises.rename(tmp, file);
    const sha256 = crypto.createHash('sha256').update(text, 'utf8').digest('hex');
    return { key, ref: { [CODEC_FIELD]: BLOB, v: VERSION, store: 'dir', key, len: Buffer.byteLength(text, 'utf8'), sha256 } };
  }

  /** `value` as stored, offloaded when its text is over the threshold; [stored, blob key or null]. */
  async function store(client, base, value) {
    const stored = encode(value);
    if (!offload || !offload.dir) return [stored, null];
    const text = JSON.stringify(stored === undefined ? null : stored);
    if (Buffer.byteLength(text, 'utf8') <= threshold) return [stored, null];
    const { key, ref } = await writeBlob(client, base, text);
    return [ref, key];
  }

  /** The raw Redis client of a Queue or a Worker (6.7.6 keeps a Worker's on its backend). */
  function redisOf(q) {
    return q.client !== undefined ? q.client : q.getBackend().client;
  }

  async function queueBase(queue) {
    const client = await redisOf(queue);
    return [client, `${queue.opts.prefix || 'bull'}:${queue.name}:`];
  }

  /** The envelope of a JSON text under `name`. */
  function seal(name, text) {
    // Level 1, as the Rust codec: most of level 6's size at a fraction of its time.
    const compressed = zlib.gzipSync(Buffer.from(asciiJson(text), 'latin1'), { level: 1 });
    if (name === GZIP) return { [CODEC_FIELD]: GZIP, v: VERSION, b64: compressed.toString('base64') };
    if (current === null) throw new CodecError(`codec ${SEALED} needs a key and none is configured`);
    const iv = crypto.randomBytes(IV_BYTES);
    const cipher = crypto.createCipheriv('aes-256-gcm', ring.keys.get(current), iv);
    cipher.setAAD(aad(SEALED, current));
    const body = Buffer.concat([cipher.update(compressed), cipher.final(), cipher.getAuthTag()]);
    return { [CODEC_FIELD]: SEALED, v: VERSION, kid: current, iv: iv.toString('base64'), b64: body.toString('base64') };
  }

  /** The value as stored: its envelope with a codec, itself without. */
  function encode(value) {
    if (codec === null) return value;
    const text = JSON.stringify(value === undefined ? null : value);
    return staysPlain(codec, text) ? value : seal(codec, text);
  }

  /** The JSON text inside an envelope. */
  function openText(env) {
    const name = env[CODEC_FIELD];
    if (typeof name !== 'string') throw new CodecError('malformed payload envelope: emq:codec is not a string');
    if (name !== GZIP && name !== SEALED) throw new CodecError(`unknown payload codec "${name}"`);
    if (typeof env.v !== 'number') throw new CodecError('malformed payload envelope: v is missing or not a number');
    if (env.v !== VERSION) throw new CodecError(`unsupported payload envelope version ${env.v}`);
    let compressed = b64field(env, 'b64');
    if (name === SEALED) {
      const kid = env.kid;
      if (typeof kid !== 'string') throw new CodecError('malformed payload envelope: kid is missing or not a string');
      const iv = b64field(env, 'iv');
      const key = ring.keys.get(kid);
      if (!key) throw new CodecError(`no key with id "${kid}" is configured to decrypt this payload`);
      if (iv.length !== IV_BYTES) throw new CodecError('malformed payload envelope: iv is not 12 bytes');
      if (compressed.length < TAG_BYTES) throw new CodecError(`payload authentication failed with key "${kid}": wrong key or tampered envelope`);
      try {
        const decipher = crypto.createDecipheriv('aes-256-gcm', key, iv);
        decipher.setAAD(aad(SEALED, kid));
        decipher.setAuthTag(compressed.subarray(compressed.length - TAG_BYTES));
        compressed = Buffer.concat([decipher.update(compressed.subarray(0, compressed.length - TAG_BYTES)), decipher.final()]);
      } catch (_) {
        throw new CodecError(`payload authentication failed with key "${kid}": wrong key or tampered envelope`);
      }
    }
    let plain;
    try {
      plain = zlib.gunzipSync(compressed, { maxOutputLength: maxDecodedBytes });
    } catch (e) {
      if (e.code === 'ERR_BUFFER_TOO_LARGE') {
        throw new CodecError(`payload decompresses to more than ${maxDecodedBytes} bytes (a decompression bomb?)`);
      }
      throw new CodecError(`corrupt compressed payload: ${e.message}`);
    }
    return plain.toString('utf8');
  }

  /** The value of a decoded JSON text. */
  function parseText(text) {
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new CodecError(`decoded payload is not JSON: ${e.message}`);
    }
  }

  /** [decoded value, its JSON text as stored inside the envelope (null when plain)]. */
  function decodeText(data) {
    if (!isEnvelope(data)) return [data, null];
    if (data[CODEC_FIELD] === BLOB) throw new CodecError('an offloaded payload is read with decodeAsync');
    const text = openText(data);
    return [parseText(text), text];
  }

  /** The plain value of stored data: decoded when it is an envelope, else as it is. */
  function decode(data) {
    return decodeText(data)[0];
  }

  /** decode, reading offloaded payloads from the blob store. */
  async function decodeAsync(data) {
    if (!isEnvelope(data) || data[CODEC_FIELD] !== BLOB) return decode(data);
    const inner = parseText(await fetchBlob(data));
    if (isEnvelope(inner) && inner[CODEC_FIELD] === BLOB) throw new CodecError('malformed payload envelope: an offloaded payload refers to another blob');
    return decode(inner);
  }

  /** A BullMQ processor seeing decoded `job.data`, its result stored encoded (and offloaded). */
  function processor(fn) {
    return async (job, token) => {
      job.data = await decodeAsync(job.data);
      const result = await fn(job, token);
      if (!offload || !offload.dir) return encode(result);
      const client = await redisOf(job.queue);
      const base = `${job.prefix}:${job.queueName}:`;
      const [stored, key] = await store(client, base, result);
      if (key) await client.hset(`${base}blobs:owner`, key, job.id);
      return stored;
    };
  }

  async function add(queue, name, data, opts) {
    const [client, base] = await queueBase(queue);
    const [stored, key] = await store(client, base, data);
    const job = await queue.add(name, stored, opts);
    if (key) await client.hset(`${base}blobs:owner`, key, job.id);
    return job;
  }

  async function addBulk(queue, jobs) {
    const [client, base] = await queueBase(queue);
    const stored = [];
    for (const j of jobs) stored.push(await store(client, base, j.data));
    const added = await queue.addBulk(jobs.map((j, i) => ({ ...j, data: stored[i][0] })));
    const owners = [];
    added.forEach((job, i) => { if (stored[i][1]) owners.push(stored[i][1], job.id); });
    if (owners.length) await client.hset(`${base}blobs:owner`, ...owners);
    return added;
  }

  return {
    codec,
    encode,
    decode,
    decodeAsync,
    decodeText,
    processor,
    add,
    addBulk,
  };
}

module.exports = { createCodec, isEnvelope, parseKeys, CodecError, CODEC_FIELD, DEFAULT_MAX_DECODED_BYTES, DEFAULT_OFFLOAD_THRESHOLD, GZIP_MIN_BYTES };
