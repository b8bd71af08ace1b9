#!/usr/bin/env python3
"""An EchoMQ job handler in Python, standard library only.

    echomq work mail --processor exec:'python3 examples/handlers/handler.py' --concurrency 4

The worker starts one such process per slot and keeps it for many jobs. Each
job arrives as one JSON line on stdin; the handler answers on stdout with
zero or more progress/log lines, then exactly one completed or failed line
(docs/processors.md). Stdout carries nothing else: diagnostics go to stderr,
which the worker logs with the job's id.
"""
import json
import sys


class Unrecoverable(Exception):
    """A failure that no retry can fix: the job fails at once."""


def send(message):
    # One line per message, flushed: a pipe is block-buffered otherwise.
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def handle(job):
    data = job["data"]
    send({"type": "log", "line": f"job {job['id']} attempt {job['attempt']}"})
    send({"type": "progress", "value": 50})
    if isinstance(data, dict) and "fail" in data:
        if data.get("unrecoverable"):
            raise Unrecoverable(data["fail"])
        raise RuntimeError(data["fail"])
    print(f"handled {job['name']} {job['id']}", file=sys.stderr, flush=True)
    return {"handled": job["name"], "echo": data}


def main():
    send({"type": "ready"})  # optional: a handler may say nothing before its first job
    for line in sys.stdin:  # ends when the worker closes stdin
        if not line.strip():
            continue
        job = json.loads(line)
        if job.get("type") != "job":
            continue  # a message of a later protocol version
        try:
            send({"type": "completed", "value": handle(job)})
        except Unrecoverable as e:
            send({"type": "failed", "error": str(e), "unrecoverable": True})
        except Exception as e:  # retried while the job has attempts left
            send({"type": "failed", "error": str(e)})


if __name__ == "__main__":
    main()
