//! Large queues for the bound tests and `just bench-scale`: [`fill`] writes
//! jobs straight into Redis (one Lua call per few thousand jobs, with the
//! fields an add and a completion write), and [`Monitor`] records what Redis
//! executes, per client command and per command a script runs inside it, so
//! a test can assert the work of each call as a count.

use std::io::Write;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::{Client, LuaInterface};

/// Jobs written per Lua call by [`fill`].
pub const FILL_CHUNK: u64 = 5000;

const FILL: &str = r#"
local p = KEYS[1]
local first, n, completed = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == "1"
local t = ARGV[4]
local data = ARGV[5]
for id = first, first + n - 1 do
  local key = p .. id
  if completed then
    redis.call("HSET", key, "name", "job", "data", data, "opts", '{"attempts":0}',
      "timestamp", t, "delay", "0", "priority", "0", "processedOn", t, "ats", "1",
      "atm", "1", "returnvalue", "null", "finishedOn", t)
    redis.call("ZADD", p .. "completed", t, id)
  else
    redis.call("HSET", key, "name", "job", "data", data, "opts", '{"attempts":0}',
      "timestamp", t, "delay", "0", "priority", "0")
    redis.call("LPUSH", p .. "wait", id)
  end
end
if not completed and n > 0 then
  -- As an add to a running queue: the marker wakes blocked workers.
  redis.call("ZADD", p .. "marker", 0, "0")
end
local top = first + n - 1
local cur = tonumber(redis.call("GET", p .. "id") or "0")
if top > cur then
  redis.call("SET", p .. "id", top)
end
redis.call("HSET", p .. "meta", "opts.maxLenEvents", "10000", "version", "bullmq:6.7.6")
return top
"#;

/// Writes `completed` completed jobs, then `waiting` waiting jobs, into
/// queue `queue` of prefix `emq` (ids go on from the queue's counter), with
/// the fields EchoMQ's add and completion write and `data` as their data.
/// Returns the last id written.
pub async fn fill(client: &Client, queue: &str, waiting: u64, completed: u64, data: &str) -> u64 {
    let prefix = format!("emq:{queue}:");
    let counter: Option<u64> = fred::prelude::KeysInterface::get(client, format!("{prefix}id"))
        .await
        .unwrap();
    let mut next = counter.unwrap_or(0) + 1;
    let t = "1700000000000";
    for (n, done) in [(completed, true), (waiting, false)] {
        let mut left = n;
        while left > 0 {
            let chunk = left.min(FILL_CHUNK);
            let _: u64 = client
                .eval(
                    FILL,
                    vec![prefix.clone()],
                    vec![
                        next.to_string(),
                        chunk.to_string(),
                        if done { "1" } else { "0" }.to_owned(),
                        t.to_owned(),
                        data.to_owned(),
                    ],
                )
                .await
                .unwrap();
            next += chunk;
            left -= chunk;
        }
    }
    next - 1
}

/// One command a client sent, with the commands Redis ran inside it (a
/// script's calls).
#[derive(Debug, Clone)]
pub struct Call {
    /// The command, upper case (`EVALSHA`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// What a script ran inside it: command (upper case) and arguments.
    pub inner: Vec<(String, Vec<String>)>,
}

/// `MONITOR` on a server (a raw connection of its own), recording every
/// command from the start.
pub struct Monitor {
    stream: std::net::TcpStream,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    /// Starts monitoring the server on `port`; returns once the monitor is
    /// attached (its own `ECHO` through `client` came back in the stream).
    pub async fn start(port: u16, client: &Client) -> Monitor {
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect the monitor");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut out = BufReader::new(stream.try_clone().expect("clone the monitor socket"));
        // Attached once the server said OK: what it runs from then on is
        // streamed to us.
        let mut ok = String::new();
        out.read_line(&mut ok).expect("MONITOR answers");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        // Each monitored command is one RESP simple string (`+…`): the
        // server escapes newlines inside arguments.
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(l) = line.strip_prefix('+') {
                    sink.lock().unwrap().push(l.to_owned());
                }
            }
        });
        let m = Monitor { stream, lines };
        m.mark(client, "monitor-start").await;
        m.lines.lock().unwrap().clear();
        m
    }

    /// Sends `ECHO <marker>` and waits until the monitor has printed it.
    async fn mark(&self, client: &Client, marker: &str) {
        let _: String = fred::prelude::ClientInterface::echo(client, marker)
            .await
            .unwrap();
        let needle = format!("\"{marker}\"");
        crate::wait_until(
            "the monitor prints the marker",
            Duration::from_secs(30),
            async || {
                self.lines
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|l| l.contains(&needle))
            },
        )
        .await;
    }

    /// Everything executed since the start (or the last `take`), grouped
    /// by client command; the monitor keeps running.
    pub async fn take(&self, client: &Client) -> Vec<Call> {
        self.mark(client, "monitor-take").await;
        let lines = std::mem::take(&mut *self.lines.lock().unwrap());
        let mut calls: Vec<Call> = Vec::new();
        for line in lines {
            let Some((source, words)) = parse_line(&line) else {
                continue;
            };
            if words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("echo"))
                && words.get(1).is_some_and(|w| w.starts_with("monitor-"))
            {
                continue;
            }
            let mut it = words.into_iter();
            let Some(command) = it.next() else { continue };
            let command = command.to_ascii_uppercase();
            let args: Vec<String> = it.collect();
            if source == "lua" {
                if let Some(last) = calls.last_mut() {
                    last.inner.push((command, args));
                }
            } else {
                calls.push(Call {
                    command,
                    args,
                    inner: Vec::new(),
                });
            }
        }
        calls
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// `1700000000.123 [0 127.0.0.1:5555] "CMD" "arg"` → (`127.0.0.1:5555` or
/// `lua`, words unquoted).
fn parse_line(line: &str) -> Option<(String, Vec<String>)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let source = line[open + 1..close].split_whitespace().nth(1)?.to_owned();
    let mut words = Vec::new();
    let mut chars = line[close + 1..].chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut w = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        if let Ok(b) = u8::from_str_radix(&hex, 16) {
                            w.push(b as char);
                        }
                    }
                    Some('n') => w.push('\n'),
                    Some('r') => w.push('\r'),
                    Some('t') => w.push('\t'),
                    Some(other) => w.push(other),
                    None => {}
                },
                other => w.push(other),
            }
        }
        words.push(w);
    }
    Some((source, words))
}

/// The largest number of elements a command's arguments or range name, for
/// the range commands a bound is about (`LRANGE k 0 999` reads 1000).
pub fn range_of(command: &str, args: &[String]) -> Option<i64> {
    let n = |i: usize| args.get(i).and_then(|a| a.parse::<i64>().ok());
    match command {
        "LRANGE" | "ZRANGE" | "ZREVRANGE" => {
            let (s, e) = (n(1)?, n(2)?);
            // A negative index counts from the end: only a range of the same
            // sign says its size.
            ((s >= 0) == (e >= 0)).then(|| e - s + 1)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_parse() {
        let (src, w) =
            parse_line(r#"1796167200.235222 [0 127.0.0.1:48586] "eval" "a \"b\"" "0""#).unwrap();
        assert_eq!(src, "127.0.0.1:48586");
        assert_eq!(w, ["eval", "a \"b\"", "0"]);
        let (src, w) = parse_line(r#"1796167200.235381 [0 lua] "SET" "a\x41" "1""#).unwrap();
        assert_eq!((src.as_str(), w[1].as_str()), ("lua", "aA"));
        assert_eq!(
            range_of("LRANGE", &["k".into(), "0".into(), "999".into()]),
            Some(1000)
        );
        assert_eq!(
            range_of("LRANGE", &["k".into(), "0".into(), "-1".into()]),
            None
        );
    }
}

/// How one command's work grows, by what its arguments say: the allowlist of
/// the bound tests. Every command a client sends or a script runs is put in
/// one of these classes by [`cost`]; one that fits none is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// O(1) or O(log N) in the size of what it touches, per element it
    /// names: `HGET`, `ZADD`, `LPUSH`, `BZPOPMIN`…
    Constant,
    /// At most as many elements as an argument says, checked against the
    /// bound: a range, a `LIMIT`, a `COUNT`, a `MAXLEN`, the elements named.
    Bounded(i64),
    /// O(N) in a structure whose size the runtime bounds by itself: `LREM`
    /// of the `active` list (at most the workers' concurrency, BullMQ's own
    /// finish), `HGETALL` of a job, a scheduler or the `meta` hash (a fixed
    /// set of fields).
    SmallStructure,
}

/// Commands O(1)/O(log N) per element named (their element count is checked
/// as arguments).
const CONSTANT: &[&str] = &[
    "GET",
    "SET",
    "SETNX",
    "PSETEX",
    "GETDEL",
    "EXISTS",
    "TYPE",
    "PTTL",
    "TTL",
    "EXPIRE",
    "PEXPIRE",
    "PEXPIREAT",
    "PERSIST",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "HGET",
    "HSET",
    "HSETNX",
    "HMSET",
    "HMGET",
    "HEXISTS",
    "HDEL",
    "HINCRBY",
    "HLEN",
    "HSTRLEN",
    "SADD",
    "SREM",
    "SISMEMBER",
    "SCARD",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZMSCORE",
    "ZCARD",
    "ZINCRBY",
    "ZRANK",
    "ZREVRANK",
    "ZCOUNT",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LLEN",
    "RPOPLPUSH",
    "LMOVE",
    "BZPOPMIN",
    "BZPOPMAX",
    "XADD",
    "XLEN",
    "XDEL",
    "DEL",
    "UNLINK",
    "TIME",
    "PING",
    "ECHO",
    "CLIENT",
    "INFO",
    "QUIT",
    "HELLO",
    "AUTH",
    "SELECT",
    "SUBSCRIBE",
    "PUBLISH",
    "EVALSHA",
    "EVAL",
    "SCRIPT",
    "WAIT",
    "PUBSUB",
];

/// The number after `word` (`LIMIT off COUNT` takes the second).
fn after(args: &[String], word: &str, skip: usize) -> Option<i64> {
    let i = args.iter().position(|a| a.eq_ignore_ascii_case(word))?;
    args.get(i + 1 + skip)?.parse().ok()
}

/// Classifies `command` (upper case) with `args` against `max` elements per
/// command, or says why it is not bounded.
pub fn cost(command: &str, args: &[String], max: i64) -> Result<Cost, String> {
    let within = |n: Option<i64>, what: &str| match n {
        Some(n) if (0..=max).contains(&n) => Ok(Cost::Bounded(n)),
        Some(n) => Err(format!("{what} {n} is over the bound {max}")),
        None => Err(format!("no {what}: the whole structure")),
    };
    match command {
        // The elements named: a call sends a bounded number of them.
        c if CONSTANT.contains(&c) => {
            if args.len() as i64 > 2 * max + 8 {
                Err(format!("{} arguments (bound {max} elements)", args.len()))
            } else {
                Ok(Cost::Constant)
            }
        }
        "LRANGE" | "ZRANGE" | "ZREVRANGE" => {
            if args.iter().any(|a| a.eq_ignore_ascii_case("BYSCORE")) {
                return within(after(args, "LIMIT", 1), "LIMIT count");
            }
            within(range_of(command, args), "range")
        }
        "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" => within(after(args, "LIMIT", 1), "LIMIT count"),
        "ZREMRANGEBYRANK" => within(
            range_of("ZRANGE", &[String::new(), args[1].clone(), args[2].clone()]),
            "range",
        ),
        "ZPOPMIN" | "ZPOPMAX" => within(args.get(1).map_or(Some(1), |n| n.parse().ok()), "count"),
        "SCAN" | "SSCAN" | "HSCAN" | "ZSCAN" => within(after(args, "COUNT", 0), "COUNT"),
        "XRANGE" | "XREVRANGE" | "XREAD" | "XREADGROUP" => within(after(args, "COUNT", 0), "COUNT"),
        "LPOS" => within(after(args, "MAXLEN", 0).filter(|n| *n > 0), "MAXLEN"),
        // From the nearer end: `LINDEX k -1` is O(1).
        "LINDEX" => {
            let i: Option<i64> = args.get(1).and_then(|i| i.parse().ok());
            within(i.map(|i| if i < 0 { -i - 1 } else { i }), "index")
        }
        // What it removes: `start` from the head, `-stop - 1` from the tail.
        "LTRIM" => {
            let n = |i: usize| args.get(i).and_then(|a| a.parse::<i64>().ok());
            match (n(1), n(2)) {
                (Some(start), Some(stop)) if start >= 0 && stop < 0 => {
                    within(Some(start.max(-stop - 1)), "trimmed")
                }
                _ => Err("a trim whose removed count its arguments do not say".into()),
            }
        }
        "LREM" if args.first().is_some_and(|k| k.ends_with(":active")) => Ok(Cost::SmallStructure),
        "HGETALL" => {
            let key = args.first().map(String::as_str).unwrap_or_default();
            // `<prefix>:<queue>:` then the rest: a job id, `meta`, `repeat:<id>`.
            let rest = key.splitn(3, ':').nth(2).unwrap_or_default();
            let small = rest == "meta"
                || rest
                    .strip_prefix("repeat:")
                    .is_some_and(|id| !id.contains(':'))
                || (!rest.contains(':') && !rest.is_empty());
            if small {
                Ok(Cost::SmallStructure)
            } else {
                Err(format!("HGETALL of {key}, a hash that grows"))
            }
        }
        _ => Err("not a classified command".into()),
    }
}
