//! One function per subcommand.

use std::collections::HashMap;
use std::time::Duration;

use echomq::protocol::{Event, QueueKeys};
use echomq::{
    Backoff, Connection, Delivery, JobOptions, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg,
    QueueOptions, StartFrom,
};
use fred::prelude::{ClientInterface, SortedSetsInterface, StreamsInterface, Value};

use crate::cli::{AddOpts, Cli, Command, SchedulerAction, StateArg};
use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub async fn run(cli: Cli) -> Res {
    if matches!(
        cli.command,
        Command::Work(_) | Command::Ui(_) | Command::Relay(_)
    ) {
        // main hands `work`, `ui` and `relay` to their own modules, which
        // have their own exit codes.
        return Err("`echomq work`, `ui` and `relay` are run by their own modules".into());
    }
    if matches!(cli.command, Command::Demo) {
        let conn = Connection::connect(cli.connection_config()).await?;
        let r = crate::demo::demo(conn.clone(), &cli.url).await;
        conn.close().await;
        return r;
    }
    if let Command::AddFlow { file } = &cli.command {
        let flows = crate::flows::read_flow_file(file)?;
        let conn = Connection::connect(cli.connection_config()).await?;
        let r = crate::flows::add_flow(&conn, flows).await;
        conn.close().await;
        return r;
    }
    // Validate everything that can be validated before touching Redis.
    let queue_name = queue_of(&cli.command);
    QueueKeys::new(&cli.prefix, queue_name)?;
    let plan = Plan::build(&cli.command)?;
    let conn = Connection::connect(cli.connection_config()).await?;
    // Read-only commands must not write the meta hash.
    let read_only = matches!(
        cli.command,
        Command::Schedulers {
            action: SchedulerAction::List,
            ..
        } | Command::Stats { .. }
            | Command::Jobs { .. }
            | Command::Job { .. }
            | Command::Events { .. }
            | Command::Audit { .. }
            | Command::Flow { .. }
            | Command::Metrics { .. }
    ) || cli.command.reads_only_limits();
    let queue = Queue::with_options(
        &conn,
        queue_name,
        QueueOptions::default().skip_meta_update(read_only),
    )
    .await?;
    let r = execute(&conn, &queue, cli.command, plan).await;
    conn.close().await;
    r
}

fn queue_of(c: &Command) -> &str {
    match c {
        Command::Stats { queue }
        | Command::Add { queue, .. }
        | Command::AddBulk { queue, .. }
        | Command::Jobs { queue, .. }
        | Command::Job { queue, .. }
        | Command::Cancel { queue, .. }
        | Command::Retry { queue, .. }
        | Command::Promote { queue, .. }
        | Command::Remove { queue, .. }
        | Command::Pause { queue }
        | Command::Resume { queue }
        | Command::Drain { queue, .. }
        | Command::Obliterate { queue, .. }
        | Command::Clean { queue, .. }
        | Command::Events { queue, .. }
        | Command::Audit { queue }
        | Command::Schedulers { queue, .. }
        | Command::Limiter { queue, .. }
        | Command::Concurrency { queue, .. }
        | Command::Groups { queue, .. }
        | Command::Dedup { queue, .. }
        | Command::Flow { queue, .. }
        | Command::Metrics { queue } => queue,
        Command::Work(_) => "work",
        Command::Ui(_) => "ui",
        Command::Relay(_) => "relay",
        Command::Demo | Command::AddFlow { .. } => "demo",
    }
}

/// What a writing command will send, fully validated before connecting.
enum Plan {
    None,
    Add(Box<(serde_json::Value, JobOptions)>),
    Bulk(crate::bulk::BulkPlan),
    Scheduler(Box<echomq::SchedulerSpec>),
}

impl Plan {
    fn build(c: &Command) -> Res<Plan> {
        Ok(match c {
            Command::Add { data, opts, .. } => Plan::Add(Box::new(add_plan(data, opts)?)),
            Command::AddBulk {
                file,
                from_line,
                chunk,
                ..
            } => Plan::Bulk(crate::bulk::BulkPlan::check(file, *from_line, *chunk)?),
            Command::Schedulers { action, .. } => scheduler_plan(action)?,
            Command::Retry {
                id: None,
                all: false,
                ..
            }
            | Command::Promote {
                id: None,
                all: false,
                ..
            } => return Err("give a job id or --all".into()),
            _ => Plan::None,
        })
    }
}

fn add_plan(data: &str, opts: &AddOpts) -> Res<(serde_json::Value, JobOptions)> {
    let data: serde_json::Value =
        serde_json::from_str(data).map_err(|e| format!("job data is not valid JSON: {e}"))?;
    let o = add_options(opts)?;
    o.validate()?;
    Ok((data, o))
}

fn scheduler_plan(action: &SchedulerAction) -> Res<Plan> {
    let SchedulerAction::Upsert {
        id,
        every,
        cron,
        tz,
        name,
        data,
        limit,
        start,
        end,
    } = action
    else {
        return Ok(Plan::None);
    };
    let mut spec = match (every, cron) {
        (Some(ms), None) => echomq::SchedulerSpec::every(id, Duration::from_millis(*ms)),
        (None, Some(p)) => echomq::SchedulerSpec::cron(id, p, tz.as_deref()),
        _ => return Err("give --every MS or --cron PATTERN".into()),
    };
    spec.template.name = name.clone();
    if let Some(d) = data {
        spec.template.data =
            serde_json::from_str(d).map_err(|e| format!("--data is not valid JSON: {e}"))?;
    }
    spec.limit = *limit;
    spec.start_date = *start;
    spec.end_date = *end;
    // The spec is checked again by upsert; checking here keeps
    // "bad arguments never write" independent of the order there.
    spec.validate(echomq::clock::now_ms())?;
    Ok(Plan::Scheduler(Box::new(spec)))
}

fn add_options(o: &AddOpts) -> Res<JobOptions> {
    let mut opts = JobOptions {
        delay: o.delay,
        priority: o.priority,
        lifo: o.lifo,
        job_id: o.job_id.clone(),
        attempts: o.attempts,
        timeout: o.timeout,
        group: o.group.as_ref().map(|id| echomq::groups::GroupOptions {
            id: id.clone(),
            priority: o.group_priority,
        }),
        ..Default::default()
    };
    if let Some(b) = &o.backoff {
        let (kind, ms) = b
            .split_once(':')
            .ok_or("--backoff takes fixed:MS or exponential:MS")?;
        let delay: u64 = ms
            .parse()
            .map_err(|_| format!("--backoff delay {ms:?} is not a number of ms"))?;
        opts.backoff = Some(match kind {
            "fixed" => Backoff::Fixed {
                delay,
                jitter: None,
            },
            "exponential" => Backoff::Exponential {
                delay,
                jitter: None,
            },
            other => {
                return Err(format!("unknown backoff type {other:?} (fixed or exponential)").into())
            }
        });
    }
    Ok(opts)
}

async fn execute(conn: &Connection, q: &Queue, command: Command, plan: Plan) -> Res {
    match command {
        Command::Stats { .. } => stats(conn, q).await,
        Command::Add { name, .. } => add(q, &name, plan).await,
        Command::AddBulk { .. } => add_bulk(q, plan).await,
        Command::Jobs {
            state,
            start,
            end,
            asc,
            name: None,
            search: None,
            ..
        } => list_jobs(q, state, start, end, asc).await,
        Command::Jobs {
            state,
            start,
            end,
            asc,
            name,
            search,
            ..
        } => crate::search::search_jobs(q, state.into(), start, end, asc, name, search).await,
        Command::Limiter { action, .. } => crate::limits::limiter(q, action).await,
        Command::Concurrency { action, .. } => crate::limits::concurrency(q, action).await,
        Command::Dedup { action, .. } => crate::dedup::dedup(q, action).await,
        Command::Groups { action, .. } => crate::groups::groups(q, action).await,
        Command::Job { id, .. } => show_job(conn, q, &id).await,
        Command::Cancel {
            id, reason, retry, ..
        } => cancel(q, &id, &reason, retry).await,
        Command::Flow {
            id,
            depth,
            max_children,
            ..
        } => crate::flows::show_flow(q, &id, depth, max_children).await,
        Command::Metrics { .. } => crate::flows::metrics(q).await,
        Command::Retry { id, count, .. } => retry(q, id, count).await,
        Command::Promote { id, count, .. } => promote(q, id, count).await,
        Command::Remove {
            id, keep_children, ..
        } => remove(q, &id, keep_children).await,
        Command::Pause { .. } => Ok(q.pause().await?),
        Command::Resume { .. } => Ok(q.resume().await?),
        Command::Drain { delayed, chunk, .. } => crate::chunked::drain(q, delayed, chunk).await,
        Command::Obliterate { force, chunk, .. } => {
            crate::chunked::obliterate(q, force, chunk).await
        }
        Command::Clean {
            state,
            grace,
            limit,
            chunk,
            ..
        } => crate::chunked::clean(q, state.into(), grace, limit, chunk).await,
        Command::Events { follow, from, .. } => events(conn, q, follow, from).await,
        Command::Work(_) | Command::Ui(_) | Command::Relay(_) => Ok(()),
        Command::Demo | Command::AddFlow { .. } => unreachable!("handled before connecting"),
        Command::Schedulers { action, .. } => schedulers(conn, q, action, plan).await,
        Command::Audit { .. } => audit(conn, q).await,
    }
}

async fn add(q: &Queue, name: &str, plan: Plan) -> Res {
    let Plan::Add(add) = plan else { unreachable!() };
    let (data, opts) = *add;
    anstream::println!("{}", q.add(name, &data, opts).await?);
    Ok(())
}

async fn add_bulk(q: &Queue, plan: Plan) -> Res {
    let Plan::Bulk(plan) = plan else {
        unreachable!()
    };
    crate::bulk::send(q, &plan).await
}

async fn list_jobs(q: &Queue, state: StateArg, start: i64, end: i64, asc: bool) -> Res {
    for job in q.get_jobs(&[state.into()], start, end, asc).await? {
        anstream::println!(
            "{}  {}  {}",
            paint(style::BOLD, &job.id),
            job.name,
            paint(style::DIM, truncate(&job.data.to_string(), 80))
        );
    }
    Ok(())
}

/// One job by id, or (`--all`) every failed job, `count` per call.
async fn retry(q: &Queue, id: Option<String>, count: u64) -> Res {
    match id {
        Some(id) => Ok(q.retry_job(&id, false).await?),
        None => crate::chunked::retry_all(q, count).await,
    }
}

/// One job by id, or (`--all`) every delayed job, `count` per call.
async fn promote(q: &Queue, id: Option<String>, count: u64) -> Res {
    match id {
        Some(id) => Ok(q.promote(&id).await?),
        None => crate::chunked::promote_all(q, count).await,
    }
}

async fn remove(q: &Queue, id: &str, keep_children: bool) -> Res {
    match q.remove(id, !keep_children).await? {
        echomq::queue::RemoveOutcome::Removed => println!("removed {id}"),
        echomq::queue::RemoveOutcome::Locked => {
            return Err(format!("job {id} is locked by a worker; nothing removed").into())
        }
    }
    Ok(())
}

async fn schedulers(conn: &Connection, q: &Queue, action: SchedulerAction, plan: Plan) -> Res {
    let schedulers = echomq::JobSchedulers::new(conn, q.name())?;
    match action {
        SchedulerAction::List => list_schedulers(&schedulers).await,
        SchedulerAction::Upsert { .. } => {
            let Plan::Scheduler(spec) = plan else {
                unreachable!()
            };
            upsert_scheduler(&schedulers, &spec).await
        }
        SchedulerAction::Remove { id } => {
            if !schedulers.remove(&id).await? {
                return Err(format!("no scheduler {id}").into());
            }
            anstream::println!("removed {id}");
            Ok(())
        }
    }
}

async fn list_schedulers(schedulers: &echomq::JobSchedulers) -> Res {
    for s in schedulers.list().await? {
        let how = match (&s.every, &s.pattern) {
            (Some(ms), _) => format!("every {ms} ms"),
            (None, Some(p)) => {
                format!("cron `{p}` {}", s.tz.as_deref().unwrap_or("(local zone)"))
            }
            _ => "?".into(),
        };
        anstream::println!(
            "{}  {}  next {}  iterations {}",
            paint(style::BOLD, &s.id),
            how,
            s.next,
            s.iteration_count
        );
    }
    Ok(())
}

async fn upsert_scheduler(schedulers: &echomq::JobSchedulers, spec: &echomq::SchedulerSpec) -> Res {
    match schedulers.upsert(spec).await? {
        Some(it) => anstream::println!(
            "{} → next iteration {} in {} ms",
            spec.id,
            it.job_id,
            it.delay
        ),
        None => anstream::println!("{}: no iteration (limit or end date reached)", spec.id),
    }
    Ok(())
}

async fn audit(conn: &Connection, q: &Queue) -> Res {
    // One bounded read per call (docs/stalled-checker.md §Audit); the bar
    // says where it is on a terminal.
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("auditing {msg} {bar:30} {pos}/{len} ids")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = echomq::audit::audit_paged(
        conn,
        q.name(),
        &echomq::audit::AuditOptions::default(),
        |p| {
            bar.set_length(p.ids_total.max(p.ids_read));
            bar.set_position(p.ids_read);
            bar.set_message(format!("{} ({} calls)", p.phase, p.calls));
        },
    )
    .await;
    bar.finish_and_clear();
    let report = report?;
    for v in &report.violations {
        let s = if v.hard { style::BAD } else { style::WARN };
        anstream::println!(
            "{} {} {}",
            paint(s, &v.check),
            v.job_id.as_deref().unwrap_or("-"),
            v.detail
        );
    }
    anstream::println!(
        "audit of {}: {} ids, {} violations ({} hard), {} calls",
        q.name(),
        report.ids,
        report.violations.len(),
        report.hard_count(),
        report.calls
    );
    if report.hard_count() > 0 {
        return Err("hard invariant violations found".into());
    }
    Ok(())
}

async fn stats(conn: &Connection, q: &Queue) -> Res {
    let c = q.counts().await?;
    anstream::println!(
        "{} {}{}",
        paint(style::BOLD, "queue"),
        q.name(),
        if q.is_paused().await? {
            paint(style::WARN, "  (paused)")
        } else {
            String::new()
        }
    );
    for (name, n) in [
        ("waiting", c.waiting),
        ("prioritized", c.prioritized),
        ("delayed", c.delayed),
        ("active", c.active),
        ("completed", c.completed),
        ("failed", c.failed),
        ("waiting-children", c.waiting_children),
    ] {
        anstream::println!("  {name:<17}{n}");
    }
    let schedulers: u64 = conn.pool().zcard(q.keys().repeat()).await?;
    anstream::println!("  {:<17}{schedulers}", "schedulers");
    // On a cluster the worker connections are listed by the node that serves
    // the queue's slot (blocking reads go there).
    let client = conn.pool().next();
    let list: String = match echomq::Connection::node_for_key(client, &q.keys().marker()) {
        Some(node) => {
            client
                .with_cluster_node(&node)
                .client_list::<String, String>(None, None)
                .await
        }
        None => client.client_list::<String, String>(None, None).await,
    }
    .unwrap_or_default();
    let base = q.keys().worker_client_name(None);
    let workers: Vec<String> = list
        .lines()
        .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("name=")))
        .filter(|n| *n == base || n.starts_with(&format!("{base}:w:")))
        .map(|n| {
            n.strip_prefix(&format!("{base}:w:"))
                .unwrap_or("(unnamed)")
                .to_owned()
        })
        .collect();
    anstream::println!(
        "  {:<17}{} {}",
        "workers",
        workers.len(),
        paint(style::DIM, workers.join(", "))
    );
    Ok(())
}

async fn cancel(q: &Queue, id: &str, reason: &str, retry: bool) -> Res {
    use echomq::queue::{CancelMode, CancelOutcome};
    let mode = if retry {
        CancelMode::Retry
    } else {
        CancelMode::Fail
    };
    match q.cancel(id, reason, mode).await? {
        CancelOutcome::Stopped { retrying: true } => {
            anstream::println!("job {id} stopped; it will run again (attempts remain)")
        }
        CancelOutcome::Stopped { retrying: false } => {
            anstream::println!("job {id} stopped and failed: {reason}")
        }
        CancelOutcome::Removed => anstream::println!("job {id} had not started; removed"),
        CancelOutcome::AlreadyFinished(state) => {
            anstream::println!("job {id} had already finished ({state:?}); nothing changed")
        }
        CancelOutcome::NotFound => return Err(format!("job {id} not found").into()),
        other => anstream::println!("job {id}: {other:?}"),
    }
    Ok(())
}

async fn show_job(conn: &Connection, q: &Queue, id: &str) -> Res {
    let Some(job) = q.get_job(id).await? else {
        return Err(format!("job {id} not found").into());
    };
    let state = q.get_state(id).await?;
    anstream::println!("{} {}  {:?}", paint(style::BOLD, "job"), job.id, state);
    // From the delayed score: a deduplicated add with `reschedule` moves it
    // without touching `timestamp`.
    if let Some(due) = q.get_due_time(id).await? {
        anstream::println!("  {:<13}{due}", "due");
    }
    let raw: HashMap<String, String> =
        fred::prelude::HashesInterface::hgetall(conn.pool(), q.keys().job(id)).await?;
    let mut fields: Vec<_> = raw.into_iter().collect();
    fields.sort();
    for (k, v) in fields {
        anstream::println!("  {k:<13}{v}");
    }
    crate::flows::show_dependencies(q, id).await?;
    let logs = q.get_logs(id, 0, -1).await?;
    if !logs.is_empty() {
        anstream::println!("{}", paint(style::BOLD, "logs"));
        for l in logs {
            anstream::println!("  {l}");
        }
    }
    Ok(())
}

async fn events(conn: &Connection, q: &Queue, follow: bool, from: Option<String>) -> Res {
    if !follow {
        let entries: Value = match &from {
            Some(id) => {
                conn.pool()
                    .xrange(q.keys().events(), format!("({id}"), "+", Some(1000))
                    .await?
            }
            None => {
                let mut v: Value = conn
                    .pool()
                    .xrevrange(q.keys().events(), "+", "-", Some(20))
                    .await?;
                if let Value::Array(a) = &mut v {
                    a.reverse();
                }
                v
            }
        };
        for e in parse_entries(entries) {
            print_event(&e);
        }
        return Ok(());
    }
    let mut args = QueueEventsArgs::new(conn.clone(), q.name());
    args.start = from.map(StartFrom::After).unwrap_or(StartFrom::Now);
    let (actor, _h) = ractor::Actor::spawn(None, QueueEvents, args)
        .await
        .map_err(|e| e.to_string())?;
    let mut sub = ractor::call_t!(actor, QueueEventsMsg::Subscribe, 5000, 10_000)
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            d = sub.recv() => match d {
                Some(Delivery::Event(e)) => print_event(&e),
                Some(Delivery::Lagged(n)) => anstream::println!("{}", paint(style::WARN, format!("… {n} events skipped (output too slow)"))),
                Some(Delivery::Gap { after, next }) => anstream::println!("{}", paint(style::WARN, format!("… gap: stream trimmed between {after} and {next}"))),
                None => return Err("the events reader stopped".into()),
            },
            _ = tokio::signal::ctrl_c() => {
                actor.cast(QueueEventsMsg::Close).ok();
                return Ok(());
            }
        }
    }
}

fn parse_entries(v: Value) -> Vec<Event> {
    let Value::Array(entries) = v else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|e| {
            let Value::Array(mut parts) = e else {
                return None;
            };
            let Value::Array(flat) = parts.pop()? else {
                return None;
            };
            let id = parts.first()?.as_string()?;
            let flat: Vec<String> = flat.into_iter().filter_map(|v| v.as_string()).collect();
            Some(Event::parse(
                id,
                flat.chunks(2)
                    .filter(|c| c.len() == 2)
                    .map(|c| (c[0].clone(), c[1].clone()))
                    .collect(),
            ))
        })
        .collect()
}

fn print_event(e: &Event) {
    let name = e.kind.name();
    let detail = match &e.kind {
        echomq::EventKind::Completed { return_value, .. } => {
            format!("→ {}", truncate(&return_value.to_string(), 60))
        }
        echomq::EventKind::Failed { failed_reason, .. } => {
            format!("✗ {}", truncate(failed_reason, 60))
        }
        echomq::EventKind::Progress { data, .. } => data.to_string(),
        echomq::EventKind::Delayed { delay, .. } => format!("due {delay}"),
        echomq::EventKind::Waiting { prev: Some(p), .. }
        | echomq::EventKind::Removed { prev: p, .. } => format!("from {p}"),
        echomq::EventKind::RetriesExhausted { attempts_made, .. } => {
            format!("after {attempts_made} attempts")
        }
        echomq::EventKind::Cleaned { count } => format!("{count} jobs"),
        echomq::EventKind::Unknown { fields, .. } => format!("{fields:?}"),
        _ => String::new(),
    };
    anstream::println!(
        "{} {:<17} {:<10} {}",
        paint(style::DIM, &e.id),
        paint(style::for_event(name), name),
        e.kind.job_id().unwrap_or(""),
        detail
    );
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
