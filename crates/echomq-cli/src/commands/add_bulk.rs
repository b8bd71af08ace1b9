//! `echomq add-bulk <queue> <file>`: a JSON-lines file added in chunks. The whole file is
//! read and checked first (a bad line is reported with its number and nothing
//! is written); then it is read again and sent [`chunk`](BulkPlan::chunk)
//! lines per pipelined round trip, so one call never carries the whole file.
//! Where it stops — done, interrupted, or a chunk whose replies were lost — it
//! says which line to resume from (`--from-line N`).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use echomq::{JobOptions, NewJob, Queue, QueueOptions};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::{Access, Res};
use crate::style;
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    file: std::path::PathBuf,
    /// Start at this line of the file (1-based, blank lines counted): to
    /// resume a run that stopped.
    #[arg(long, default_value_t = 1)]
    from_line: usize,
    /// Lines per pipelined round trip.
    #[arg(long, default_value_t = 1000)]
    chunk: usize,
    #[command(flatten)]
    codec: crate::codec::CodecArgs,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let queue = super::queue(t, &a.queue)?.with_codec(a.codec.options()?);
    let plan = BulkPlan::check(&a.file, a.from_line, a.chunk)?;
    queue
        .run(Access::Write, async |_, q| send(q, &plan).await)
        .await
}

/// A checked file and how to send it.
struct BulkPlan {
    path: PathBuf,
    /// First line (1-based, counting blank lines) to add.
    from_line: usize,
    /// Lines per pipelined round trip.
    chunk: usize,
    /// Jobs the file holds from `from_line` on.
    jobs: u64,
}

impl BulkPlan {
    /// Reads `path` once, checking every line from `from_line` on; keeps none
    /// of them.
    fn check(path: &Path, from_line: usize, chunk: usize) -> Res<Self> {
        if from_line == 0 {
            return Err("--from-line counts from 1".into());
        }
        if chunk == 0 {
            return Err("--chunk must be at least 1".into());
        }
        let mut jobs = 0;
        for line in lines(path, from_line)? {
            let (n, text) = line?;
            job_of(n, &text)?;
            jobs += 1;
        }
        Ok(BulkPlan {
            path: path.to_owned(),
            from_line,
            chunk,
            jobs,
        })
    }
}

/// The non-blank lines of `path` from line `from` on, with their numbers.
fn lines(path: &Path, from: usize) -> Res<impl Iterator<Item = Res<(usize, String)>>> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shown = path.display().to_string();
    Ok(std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .map(move |(i, l)| {
            l.map(|text| (i + 1, text))
                .map_err(|e| format!("{shown}: line {}: {e}", i + 1).into())
        })
        .filter(move |l| match l {
            Ok((n, text)) => *n >= from && !text.trim().is_empty(),
            Err(_) => true,
        }))
}

/// One job per line: `{"name": …, "data": …, "opts": {…}}`, options by
/// BullMQ's public names (as `queue.addBulk` takes them).
fn job_of(n: usize, line: &str) -> Res<NewJob> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("line {n}: not JSON: {e}"))?;
    let name = v["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("line {n}: `name` (a non-empty string) is required"))?;
    let options = match v.get("opts") {
        Some(serde_json::Value::Object(m)) => {
            JobOptions::from_public(m).map_err(|e| format!("line {n}: {e}"))?
        }
        None | Some(serde_json::Value::Null) => JobOptions::new(),
        Some(_) => return Err(format!("line {n}: `opts` must be an object").into()),
    };
    options.validate().map_err(|e| format!("line {n}: {e}"))?;
    let data = v.get("data").cloned().unwrap_or(json!({}));
    // The queue's own size check, here so that it names the line.
    let limit = QueueOptions::default().max_data_bytes;
    let size = data.to_string().len();
    if size > limit {
        return Err(
            format!("line {n}: data is {size} bytes, more than the {limit} allowed").into(),
        );
    }
    Ok(NewJob {
        name: name.to_owned(),
        data,
        options,
    })
}

/// Sends the checked file, `plan.chunk` lines per round trip.
async fn send(q: &Queue, plan: &BulkPlan) -> Res {
    let bar = ProgressBar::new(plan.jobs);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} lines  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut added, mut refused) = (0u64, 0u64);
    let (mut first, mut last) = (None, None);
    let mut chunk: Vec<(usize, NewJob)> = Vec::with_capacity(plan.chunk);
    let mut all = lines(&plan.path, plan.from_line)?.peekable();
    while all.peek().is_some() {
        chunk.clear();
        while chunk.len() < plan.chunk {
            let Some(line) = all.next() else { break };
            let (n, text) = line?;
            chunk.push((n, job_of(n, &text)?));
        }
        let (from, to) = (chunk[0].0, chunk[chunk.len() - 1].0);
        let jobs = chunk.iter().map(|(_, j)| j.clone()).collect();
        let results = tokio::select! {
            r = q.add_bulk_each(jobs) => r.map_err(|e| {
                bar.abandon();
                format!("lines {from}..={to}: {e}; nothing of them was written")
            })?,
            _ = tokio::signal::ctrl_c() => {
                bar.abandon();
                // The chunk in flight may or may not be stored.
                style::print_warning(&format!(
                    "interrupted while lines {from}..={to} were being sent: check whether they were added, then resume with --from-line {from} (none added) or --from-line {} (all added)",
                    to + 1
                ));
                return Err("interrupted".into());
            }
        };
        for ((n, _), r) in chunk.iter().zip(results) {
            match r {
                Ok(id) => {
                    added += 1;
                    first.get_or_insert((*n, id.clone()));
                    last = Some((*n, id));
                }
                Err(e) if e.is_outcome_unknown() || e.is_connection() => {
                    bar.abandon();
                    let confirmed = match &last {
                        Some((l, _)) => format!("lines up to {l} are added"),
                        None => "no line was confirmed added".to_owned(),
                    };
                    let advice = if e.is_outcome_unknown() {
                        format!("lines {n}..={to} were sent but their replies never came, so each may or may not be stored: check them, then resume with --from-line {n} (or after the last one stored)")
                    } else {
                        format!("resume with --from-line {n}")
                    };
                    style::print_warning(&format!("stopped at line {n}: {confirmed}; {advice}"));
                    return Err(Box::new(e));
                }
                Err(e) => {
                    refused += 1;
                    style::print_error(&format!("line {n}: refused: {e}"));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let span = match (&first, &last) {
        (Some((fl, fid)), Some((ll, lid))) => format!(" (lines {fl}..={ll}, ids {fid}..{lid})"),
        _ => String::new(),
    };
    anstream::println!("added {added} jobs{span}");
    if refused > 0 {
        return Err(format!("{refused} lines were refused by the server (see above)").into());
    }
    Ok(())
}
