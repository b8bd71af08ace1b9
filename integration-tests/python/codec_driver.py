"""Drives BullMQ for Python through the payload codec shim
(shims/python/emq_codec.py) for EchoMQ's codec tests; the twin of
interop/codec.js. Usage: python codec_driver.py <command> <redis-url> <queue> [json-args]
The keys come from ECHOMQ_CODEC_KEYS. Prints one JSON document.

  add   {codec, jobs: [{name, data, opts}]}: added one by one through the shim; the ids.
  work  {codec, count, timeoutMs, maxDecodedBytes}: a Worker through the shim until ``count`` jobs
        finished; per id what its processor saw ({"text": json.dumps(job.data)}),
        and the failures {reason, attemptsMade}.
Both take ``offloadDir`` and ``threshold`` (payloads over it to files under the dir).
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shims", "python"))

from bullmq import Queue, Worker  # noqa: E402
from bullmq.custom_errors import UnrecoverableError  # noqa: E402

from emq_codec import Codec  # noqa: E402


async def work(url, name, args, codec):
    seen, failed = {}, {}
    finished = asyncio.Event()
    count = [0]

    def tick():
        count[0] += 1
        if count[0] >= args["count"]:
            finished.set()

    async def process(job, token):
        text = json.dumps(job.data, ensure_ascii=False, separators=(",", ":"))
        seen[job.id] = {"text": text}
        return {"seenBy": "python", "len": len(text.encode())}

    def on_failed(job, err):
        failed[job.id] = {"reason": str(err), "attemptsMade": job.attemptsMade}
        if isinstance(err, UnrecoverableError) or job.attemptsMade >= (job.opts.get("attempts") or 1):
            tick()

    worker = Worker(name, codec.processor(process), {
        "connection": url, "prefix": "emq", "drainDelay": 1, "autorun": False,
    })
    worker.on("completed", lambda job, result: tick())
    worker.on("failed", on_failed)
    task = asyncio.ensure_future(worker.run())
    try:
        await asyncio.wait_for(finished.wait(), args.get("timeoutMs", 30000) / 1000)
    except asyncio.TimeoutError:
        pass
    finally:
        await worker.close()
        await task
    return {"done": count[0] >= args["count"], "seen": seen, "failed": failed}


async def main():
    command, url, name = sys.argv[1:4]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    codec = Codec(codec=args.get("codec"), max_decoded_bytes=args.get("maxDecodedBytes") or 512 * 1024 * 1024,
                  offload_dir=args.get("offloadDir"), threshold=args.get("threshold"))
    if command == "work":
        return await work(url, name, args, codec)
    if command == "add":
        queue = Queue(name, {"connection": url, "prefix": "emq"})
        try:
            ids = []
            for j in args["jobs"]:
                ids.append((await codec.add(queue, j["name"], j.get("data"), j.get("opts"))).id)
            return ids
        finally:
            await queue.close()
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
