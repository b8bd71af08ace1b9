//! The stdout of a worker process (Node `worker.js`, Rust `worker_process`)
//! read as JSON lines: one reader thread per child, every line kept in
//! order, and the `{"ev":"ready"}` handshake that lines printed before it
//! must not be lost to (a worker may take a job before it says it is ready).

use std::collections::VecDeque;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::Value;

/// The JSON lines of one child's stdout.
pub(crate) struct JsonLines {
    lines: Receiver<Value>,
    /// Every line received so far, in order.
    seen: Vec<Value>,
    /// Lines that came before `ready`: offered again before any new line.
    unread: VecDeque<Value>,
}

impl JsonLines {
    /// Starts the reader thread on `child`'s piped stdout.
    pub(crate) fn read(child: &mut Child) -> JsonLines {
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        JsonLines {
            lines: rx,
            seen: Vec::new(),
            unread: VecDeque::new(),
        }
    }

    /// The next line if one is there, without waiting.
    pub(crate) fn try_next(&mut self) -> Option<Value> {
        self.unread.pop_front().or_else(|| {
            let v = self.lines.try_recv().ok()?;
            self.seen.push(v.clone());
            Some(v)
        })
    }

    /// The next line, waiting up to `limit` (blocking the thread).
    pub(crate) fn next_within(&mut self, limit: Duration) -> Result<Value, RecvTimeoutError> {
        if let Some(v) = self.unread.pop_front() {
            return Ok(v);
        }
        let v = self.lines.recv_timeout(limit)?;
        self.seen.push(v.clone());
        Ok(v)
    }

    /// Every line arrived so far, without waiting.
    pub(crate) fn drain(&mut self) -> &[Value] {
        while let Ok(v) = self.lines.try_recv() {
            self.seen.push(v);
        }
        &self.seen
    }

    /// Every line received so far.
    pub(crate) fn seen(&self) -> &[Value] {
        &self.seen
    }

    /// A predicate for waiting on `{"ev":"ready"}` that sets aside the lines
    /// it passes over; hand them to [`JsonLines::keep_unread`] afterwards.
    pub(crate) fn ready(early: &mut Vec<Value>) -> impl FnMut(&Value) -> bool + '_ {
        move |v| {
            let ready = v["ev"] == "ready";
            if !ready {
                early.push(v.clone());
            }
            ready
        }
    }

    /// Offers `early` again, first, to the next reads.
    pub(crate) fn keep_unread(&mut self, early: Vec<Value>) {
        self.unread.extend(early);
    }
}
