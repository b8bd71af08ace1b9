"""EchoMQ payload codecs for BullMQ for Python: job data and return values
stored compressed (gzip) or sealed (AES-256-GCM over gzip, with key ids) in
the JSON envelope of docs/protocol.md §Payload envelope. The twin of
shims/node/emq-codec.js: stdlib zlib, and the ``cryptography`` package for
AES-GCM.

    codec = Codec(codec="gzip")                    # keys: ECHOMQ_CODEC_KEYS
    await codec.add(queue, "name", data, opts)     # Queue.add, encoded
    await codec.add_bulk(queue, [{"name", "data", "opts"}])
    Worker(name, codec.processor(process), ...)    # job.data decoded, result encoded

Offload (docs/operations.md §Memory): with ``offload_dir``, data over
``threshold`` bytes (as stored) that ``add`` is given goes to a file under that
directory and the job keeps a reference envelope, tracked in Redis as EchoMQ
tracks its blobs; the processor reads references from the directory, checking
the length and SHA-256. (Return values stay inline here.)

A payload that cannot be decoded raises ``CodecError``, an
``UnrecoverableError``: BullMQ fails the job without retrying.
"""
import base64
import binascii
import hashlib
import json
import os
import re
import time
import uuid
import zlib

from bullmq.custom_errors import UnrecoverableError

CODEC_FIELD = "emq:codec"
VERSION = 1
GZIP = "gzip"
SEALED = "aes256gcm+gzip"
DEFAULT_MAX_DECODED_BYTES = 512 * 1024 * 1024
IV_BYTES = 12
KEYS_ENV = "ECHOMQ_CODEC_KEYS"
BLOB = "blob"
# Under gzip, shorter JSON texts are stored plain: the envelope would not be
# smaller (docs/protocol.md §Payload envelope; the Rust GZIP_MIN_BYTES).
GZIP_MIN_BYTES = 256
DEFAULT_OFFLOAD_THRESHOLD = 256 * 1024
_BLOB_KEY = re.compile(r"^[0-9a-f]{32}$")


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _escape(match):
    code = ord(match.group())
    if code < 0x10000:
        return "\\u%04x" % code
    code -= 0x10000
    return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))


def _ascii_json(text):
    """``text`` with every character past ASCII as a \\u escape (a surrogate pair
    past U+FFFF): the same document, which readers decode on their fast path
    (docs/protocol.md §Payload envelope)."""
    return text if text.isascii() else _NON_ASCII.sub(_escape, text)


class CodecError(UnrecoverableError):
    """A payload that cannot be decoded or encoded: never retried."""


def parse_keys(spec):
    """Keys from ``id:base64`` entries separated by commas or newlines; the last is current."""
    keys, current = {}, None
    for raw in (spec or "").replace("\n", ",").split(","):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        kid, sep, b64 = entry.partition(":")
        kid = kid.strip()
        if not sep or not kid:
            raise CodecError("invalid codec key: an entry is not id:base64")
        try:
            key = base64.b64decode(b64.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise CodecError(f'invalid codec key: key "{kid}": not standard base64') from None
        if len(key) != 32:
            raise CodecError(f'invalid codec key: key "{kid}": {len(key)} bytes, AES-256 needs 32')
        keys[kid] = key
        current = kid
    return keys, current


def is_envelope(data):
    return isinstance(data, dict) and CODEC_FIELD in data


def _aad(codec, kid):
    return f"{codec}:{VERSION}:{kid}".encode()


def _b64field(env, field):
    text = env.get(field)
    if not isinstance(text, str):
        raise CodecError(f"malformed payload envelope: {field} is missing or not a string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CodecError(f'corrupt base64 in the payload envelope field "{field}"') from None


def _stays_plain(name, text):
    """Whether a JSON text is stored as it is under ``name`` (never one naming the codec field)."""
    return name == GZIP and len(text.encode()) < GZIP_MIN_BYTES and CODEC_FIELD not in text


def _gzip(data):
    # wbits 31: a gzip stream (RFC 1952), as Node's zlib.gunzipSync reads it.
    # Level 1: most of level 6's size at a fraction of its time (docs/operations.md §Memory).
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


class Codec:
    """``codec``: "gzip", "aes256gcm+gzip" or None (plain JSON); ``keys``: an
    ``id:base64,...`` string (default ECHOMQ_CODEC_KEYS); ``current``: the
    sealing key id (default the last); ``max_decoded_bytes`` (default 512 MiB)."""

    def __init__(self, codec=None, keys=None, current=None, max_decoded_bytes=DEFAULT_MAX_DECODED_BYTES,
                 offload_dir=None, threshold=DEFAULT_OFFLOAD_THRESHOLD):
        if codec not in (None, GZIP, SEALED):
            raise CodecError(f'unknown payload codec "{codec}"')
        self.codec = codec
        self._keys, last = parse_keys(os.environ.get(KEYS_ENV) if keys is None else keys)
        self._current = current or last
        if self._current is not None and self._current not in self._keys:
            raise CodecError(f'no key with id "{self._current}" is configured')
        self.max_decoded_bytes = max_decoded_bytes
        self.offload_dir = offload_dir
        self.threshold = threshold or DEFAULT_OFFLOAD_THRESHOLD

    def __repr__(self):
        return f"Codec(codec={self.codec!r}, key_ids={list(self._keys)!r}, current={self._current!r})"

    def seal(self, name, text):
        """The envelope of a JSON text under codec ``name``."""
        compressed = _gzip(_ascii_json(text).encode("ascii"))
        if name == GZIP:
            return {CODEC_FIELD: GZIP, "v": VERSION, "b64": base64.b64encode(compressed).decode()}
        if self._current is None:
            raise CodecError(f"codec {SEALED} needs a key and none is configured")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        iv = os.urandom(IV_BYTES)
        body = AESGCM(self._keys[self._current]).encrypt(iv, compressed, _aad(SEALED, self._current))
        return {
            CODEC_FIELD: SEALED,
            "v": VERSION,
            "kid": self._current,
            "iv": base64.b64encode(iv).decode(),
            "b64": base64.b64encode(body).decode(),
        }

    def encode(self, value):
        """The value as stored: its envelope with a codec, itself without."""
        if self.codec is None:
            return value
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if _stays_plain(self.codec, text):
            return value
        return self.seal(self.codec, text)

    def decode_text(self, env):
        """The JSON text inside an envelope."""
        name = env.get(CODEC_FIELD)
        if not isinstance(name, str):
            raise CodecError("malformed payload envelope: emq:codec is not a string")
        if name not in (GZIP, SEALED):
            raise CodecError(f'unknown payload codec "{name}"')
        v = env.get("v")
        if not isinstance(v, int) or isinstance(v, bool):
            raise CodecError("malformed payload envelope: v is missing or not a number")
        if v != VERSION:
            raise CodecError(f"unsupported payload envelope version {v}")
        compressed = _b64field(env, "b64")
        if name == SEALED:
            kid = env.get("kid")
            if not isinstance(kid, str):
                raise CodecError("malformed payload envelope: kid is missing or not a string")
            iv = _b64field(env, "iv")
            key = self._keys.get(kid)
            if key is None:
                raise CodecError(f'no key with id "{kid}" is configured to decrypt this payload')
            if len(iv) != IV_BYTES:
                raise CodecError("malformed payload envelope: iv is not 12 bytes")
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            try:
                compressed = AESGCM(key).decrypt(iv, compressed, _aad(SEALED, kid))
            except (InvalidTag, ValueError):
                raise CodecError(
                    f'payload authentication failed with key "{kid}": wrong key or tampered envelope'
                ) from None
        d = zlib.decompressobj(31)
        try:
            plain = d.decompress(compressed, self.max_decoded_bytes + 1)
        except zlib.error as e:
            raise CodecError(f"corrupt compressed payload: {e}") from None
        if len(plain) > self.max_decoded_bytes:
            raise CodecError(
                f"payload decompresses to more than {self.max_decoded_bytes} bytes (a decompression bomb?)"
            )
        if not d.eof:
            raise CodecError("corrupt compressed payload: truncated gzip stream")
        return plain.decode("utf-8", errors="strict")

    def decode(self, data):
        """The plain value of stored data: decoded when it is an envelope, else as it is."""
        if not is_envelope(data):
            return data
        text = self.decode_text(data)
        try:
            return json.loads(text)
        except ValueError as e:
            raise CodecError(f"decoded payload is not JSON: {e}") from None

    def _blob_path(self, key):
        if not isinstance(key, str) or not _BLOB_KEY.match(key):
            raise CodecError("malformed payload envelope: key is not a blob key (32 lowercase hex digits)")
        return os.path.join(self.offload_dir, key[:2], key)

    def load(self, data):
        """``decode``, reading an offloaded payload from ``offload_dir``."""
        if not is_envelope(data) or data.get(CODEC_FIELD) != BLOB:
            return self.decode(data)
        if data.get("v") != VERSION:
            raise CodecError(f"unsupported payload envelope version {data.get('v')}")
        length, digest = data.get("len"), data.get("sha256")
        if not isinstance(length, int) or not isinstance(digest, str):
            raise CodecError("malformed payload envelope: a blob reference needs key, len and sha256")
        if self.offload_dir is None or data.get("store") != "dir":
            raise CodecError(f"the payload is in a {data.get('store')} blob store and no such store is configured")
        if length > self.max_decoded_bytes:
            raise CodecError(f"payload decompresses to more than {self.max_decoded_bytes} bytes (a decompression bomb?)")
        path = self._blob_path(data.get("key"))
        try:
            with open(path, "rb") as f:
                raw = f.read(self.max_decoded_bytes + 1)
        except FileNotFoundError:
            raise CodecError(f"offloaded payload {data['key']} is missing from the blob store") from None
        if len(raw) != length or hashlib.sha256(raw).hexdigest() != digest:
            raise CodecError(f"offloaded payload {data['key']} does not match its reference (length or SHA-256)")
        try:
            inner = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise CodecError(f"decoded payload is not JSON: {e}") from None
        if is_envelope(inner) and inner.get(CODEC_FIELD) == BLOB:
            raise CodecError("malformed payload envelope: an offloaded payload refers to another blob")
        return self.decode(inner)

    def processor(self, fn):
        """A BullMQ processor seeing decoded ``job.data``, its result stored encoded."""

        async def run(job, token):
            job.data = self.load(job.data)
            return self.encode(await fn(job, token))

        return run

    async def _store(self, client, base, data):
        """``data`` as stored, offloaded over the threshold: (stored, blob key or None)."""
        stored = self.encode(data)
        if self.offload_dir is None:
            return stored, None
        text = json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode()
        if len(text) <= self.threshold:
            return stored, None
        key = uuid.uuid4().hex
        # Announced before it is written: a producer dying here leaves a blob the sweep finds.
        await client.zadd(f"{base}blobs", {key: int(time.time() * 1000)})
        path = self._blob_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{key}.tmp")
        with open(tmp, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        ref = {CODEC_FIELD: BLOB, "v": VERSION, "store": "dir", "key": key,
               "len": len(text), "sha256": hashlib.sha256(text).hexdigest()}
        return ref, key

    async def add(self, queue, name, data, opts=None):
        base = f"{queue.prefix}:{queue.name}:"
        stored, key = await self._store(queue.client, base, data)
        job = await queue.add(name, stored, opts or {})
        if key is not None:
            await queue.client.hset(f"{base}blobs:owner", key, job.id)
        return job

    async def add_bulk(self, queue, jobs):
        base = f"{queue.prefix}:{queue.name}:"
        stored = [await self._store(queue.client, base, j.get("data")) for j in jobs]
        added = await queue.addBulk([{**j, "data": s} for j, (s, _) in zip(jobs, stored)])
        owners = {key: job.id for job, (_, key) in zip(added, stored) if key is not None}
        if owners:
            await queue.client.hset(f"{base}blobs:owner", mapping=owners)
        return added
