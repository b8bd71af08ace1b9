#!/usr/bin/env python3
"""A handler that misbehaves on request, for the fault tests of work_exec.rs.

The job's data says what to do (`mode`); `-once` modes misbehave on the
first run of a job only, remembered by a file in $HANDLER_STATE. Before it
hangs, a handler writes its pid to $HANDLER_STATE/hang-<job id>, so that the
test can watch the process being stopped. Each process writes
$HANDLER_STATE/started-<pid> once it is ready to read jobs.
"""
import json
import os
import signal
import sys
import time

STATE = os.environ["HANDLER_STATE"]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def first_time(kind, job_id):
    path = os.path.join(STATE, f"{kind}-once-{job_id}")
    try:
        with open(path, "x"):
            return True
    except FileExistsError:
        return False


def note(name, text):
    tmp = os.path.join(STATE, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(STATE, name))


# Up and about to read its first job: a test that must not race the
# interpreter's start (a job timeout) waits for these.
note(f"started-{os.getpid()}", "")

for line in sys.stdin:
    job = json.loads(line)
    data, jid = job["data"], job["id"]
    mode = data.get("mode", "ok")
    send({"type": "log", "line": f"run {job['attempt']} of {jid} in {os.getpid()}"})
    if mode == "crash" or (mode == "crash-once" and first_time("crash", jid)):
        print(f"crashing on job {jid}", file=sys.stderr, flush=True)
        os._exit(3)
    if mode == "garbage" or (mode == "garbage-once" and first_time("garbage", jid)):
        print(f"hello from job {jid}", flush=True)
        continue
    if mode == "hang" or (mode == "hang-once" and first_time("hang", jid)):
        if data.get("stubborn"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        note(f"hang-{jid}", str(os.getpid()))
        time.sleep(3600)
    if mode == "sleep":
        time.sleep(data["ms"] / 1000)
    send({"type": "progress", "value": 100})
    send({"type": "completed", "value": {"i": data.get("i")}})
