//! The runtime's decoders of foreign text as functions of raw bytes, shared
//! by `tests/suite/properties.rs` (proptest) and `fuzz/` (libFuzzer), as the
//! protocol crate's are: the cron walk of a scheduler iteration (pattern,
//! zone and dates come from the job's stored `repeat` options, which any
//! client writes) and the connection URL with its readings for logs.

#![allow(dead_code)]

use echomq::connection::{host_port, one_slot, parse_version, redacted_url};
use echomq::scheduler::CronSchedule;

/// A fuzz target: returns for any bytes.
pub type Target = fn(&[u8]);

/// Every target, by name (the fuzz crate has one binary per entry).
pub const TARGETS: &[(&str, Target)] = &[("cron", cron), ("url", url)];

const CRON_WORDS: &[&str] = &[
    "*",
    "?",
    "0",
    "1",
    "5",
    "7",
    "15",
    "30",
    "59",
    "60",
    "-1",
    "*/5",
    "0/10",
    "1-5",
    "5-1",
    "1,3",
    "L",
    "5L",
    "LW",
    "15W",
    "1#2",
    "MON",
    "JAN",
    "H",
    "@daily",
    "@hourly",
    "@yearly",
    "@every",
    "9999999999",
    " ",
    "  ",
    "\t",
];

const ZONES: &[&str] = &[
    "UTC",
    "Europe/London",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/Santiago",
    "Etc/GMT+14",
    "Not/AZone",
    "",
];

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn int(&mut self) -> i64 {
        match self.byte() % 8 {
            0 => i64::MIN,
            1 => i64::MAX,
            2 => 1_700_000_000_000 + i64::from(self.byte()) * 3_600_000,
            3 => {
                let mut a = [0u8; 8];
                for x in &mut a {
                    *x = self.byte();
                }
                i64::from_le_bytes(a)
            }
            // As a stored u64 date read `as i64` (scheduler/iteration.rs).
            4 => u64::MAX as i64 - i64::from(self.byte()),
            5 => 8_640_000_000_000_000 + i64::from(self.byte()),
            _ => i64::from(self.byte()) * 86_400_000,
        }
    }

    fn text(&mut self) -> String {
        let len = usize::from(self.byte() % 32).min(self.0.len());
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(head).into_owned()
    }
}

/// A cron pattern, zone and dates from a foreign iteration's options: the
/// schedule parses or is refused, and the walk returns.
pub fn cron(data: &[u8]) {
    let mut b = Bytes(data);
    let fields = usize::from(b.byte() % 8);
    let pattern = if b.byte() % 4 == 0 {
        b.text()
    } else {
        (0..fields)
            .map(|_| CRON_WORDS[usize::from(b.byte()) % CRON_WORDS.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let tz = match b.byte() % 12 {
        0 => None,
        1 => Some(b.text()),
        n => Some(ZONES[usize::from(n) % ZONES.len()].to_owned()),
    };
    let Ok(schedule) = CronSchedule::new(&pattern, tz.as_deref()) else {
        return;
    };
    let after = b.int();
    let start = (b.byte() % 2 == 0).then(|| b.int());
    let end = (b.byte() % 2 == 0).then(|| b.int());
    let _ = schedule.next_after(after, start, end);
}

/// A connection URL as a user or a file gave it: read for logs and by the
/// Redis client; a redacted URL is redacted already.
pub fn url(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let shown = redacted_url(&text);
    assert_eq!(redacted_url(&shown), shown, "redaction is idempotent");
    let _ = host_port(&text);
    let _ = parse_version(&text);
    let mid = (0..=text.len() / 2)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let (a, b) = text.split_at(mid);
    let _ = one_slot(a, b);
    let _ = fred::prelude::Config::from_url(&text);
}
