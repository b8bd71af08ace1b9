"""Drives BullMQ for Python (prefix ``emq``) for EchoMQ's interop tests.

Usage: python driver.py <command> <redis-url> <queue> [json-args]
Prints one JSON document on stdout; errors go to stderr with a non-zero exit.

Commands:
  add-jobs   {"jobs": [{name, data, opts}]}: added one by one; the ids.
  work       {"count": n, "name": s}: a Worker named s runs until n jobs have
             finished (completed or failed for good); {"runs": {id: times}}.
  read-jobs  {"ids": [...]}: each job as BullMQ for Python reads it, or null.
  serve      {"concurrency", "lockDuration", "stalledInterval", "drainDelay"}:
             a long-running Worker (the chaos soak's fleet) that prints JSON
             lines: {"ev": "ready"} once running, and after stdin closes
             {"ev": "summary", "runs": {id: times}}.
"""
import asyncio
import json
import sys

from bullmq import Queue, Worker
from bullmq.custom_errors import UnrecoverableError


async def behave(job, token):
    """What a test job does, read from its data: the twin of interop/behave.js."""
    d = job.data or {}
    mode = d.get("mode")
    if mode == "fail":
        raise Exception(d.get("reason"))
    if mode == "fail-until":
        if job.attemptsMade < d.get("n", 0):
            raise Exception(d.get("reason"))
        return d.get("ret")
    if mode == "unrecoverable":
        raise UnrecoverableError(d.get("reason"))
    if mode == "progress":
        await job.updateProgress(d.get("p"))
        return d.get("ret")
    if mode == "sleep":
        await asyncio.sleep(d.get("ms", 0) / 1000)
        return d.get("ret")
    return d.get("ret")


async def work(url, name, args):
    runs = {}
    finished = asyncio.Event()
    done = set()

    async def processor(job, token):
        runs[job.id] = runs.get(job.id, 0) + 1
        return await behave(job, token)

    def on_completed(job, result):
        done.add(job.id)
        if len(done) >= args["count"]:
            finished.set()

    def on_failed(job, err):
        attempts = job.opts.get("attempts") or 0
        if job.attemptsMade >= attempts or isinstance(err, UnrecoverableError):
            on_completed(job, None)

    worker = Worker(name, processor, {
        "connection": url, "prefix": "emq", "name": args.get("name"),
        "drainDelay": 1, "autorun": False,
    })
    worker.on("completed", on_completed)
    worker.on("failed", on_failed)
    task = asyncio.ensure_future(worker.run())
    try:
        await asyncio.wait_for(finished.wait(), args.get("timeoutMs", 30000) / 1000)
    finally:
        await worker.close()
        await task
    return {"runs": runs}


def say(doc):
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


async def serve(url, name, args):
    runs = {}

    async def processor(job, token):
        runs[job.id] = runs.get(job.id, 0) + 1
        return await behave(job, token)

    opts = {"connection": url, "prefix": "emq", "autorun": False}
    for key in ("concurrency", "lockDuration", "stalledInterval", "drainDelay"):
        if key in args:
            opts[key] = args[key]
    worker = Worker(name, processor, opts)
    task = asyncio.ensure_future(worker.run())
    say({"ev": "ready"})
    # The harness closes stdin to ask for an orderly close.
    await asyncio.to_thread(sys.stdin.read)
    await worker.close()
    await task
    say({"ev": "summary", "runs": runs})


async def main():
    command, url, name = sys.argv[1:4]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    if command == "work":
        return await work(url, name, args)
    if command == "serve":
        await serve(url, name, args)
        return None
    queue = Queue(name, {"connection": url, "prefix": "emq"})
    try:
        if command == "add-jobs":
            ids = []
            for j in args["jobs"]:
                ids.append((await queue.add(j["name"], j.get("data", {}), j.get("opts", {}))).id)
            return ids
        if command == "read-jobs":
            out = {}
            for job_id in args["ids"]:
                j = await queue.getJob(job_id)
                out[job_id] = j and {
                    "name": j.name, "data": j.data, "opts": j.opts,
                    "returnvalue": j.returnvalue, "failedReason": j.failedReason,
                    "attemptsMade": j.attemptsMade, "state": await j.getState(),
                }
            return out
        raise SystemExit(f"unknown command {command}")
    finally:
        await queue.close()


if __name__ == "__main__":
    result = asyncio.run(main())
    if sys.argv[1] != "serve":
        print(json.dumps(result))
