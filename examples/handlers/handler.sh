#!/bin/sh
# An EchoMQ job handler in POSIX sh, nothing else needed:
#
#   echomq work mail --processor exec:'sh examples/handlers/handler.sh'
#
# Each job is one JSON line on stdin. This handler parses none of it: it logs
# a line, reports progress and completes with the whole job object as its
# value (docs/processors.md). Anything on stderr goes to the worker's log.
while IFS= read -r line; do
  [ -n "$line" ] || continue
  printf '{"type":"log","line":"handled by sh, pid %s"}\n' "$$"
  printf '{"type":"progress","value":100}\n'
  # The job line is JSON already: it can be the value as it is.
  printf '{"type":"completed","value":%s}\n' "$line"
  echo "sh handler: one job done" >&2
done
