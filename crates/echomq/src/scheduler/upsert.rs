//! The producer path: `upsertJobScheduler` (addJobScheduler-11).

use echomq_protocol::call::scheduler::{
    opt, AddJobScheduler, Iteration, IterationOptions, SchedulerOptions,
};
use echomq_protocol::{JobOptions, QueueKeys, ValidationError};
use serde_json::{Map, Value as Json};
use tracing::info;

use super::cron::CronSchedule;
use super::spec::{Repeat, SchedulerSpec};
use crate::connection::pool::Connection;
use crate::error::{Error, Result};

pub(super) async fn upsert(
    conn: &Connection,
    keys: &QueueKeys,
    defaults: &JobOptions,
    spec: &SchedulerSpec,
) -> Result<Option<Iteration>> {
    let now = crate::clock::now_ms();
    spec.validate(now)?;
    let template = template_options(defaults, &spec.template.options)?;
    let data = match &spec.template.data {
        Json::Null => "{}".to_owned(),
        d => serde_json::to_string(d).map_err(|e| ValidationError::Data(e.to_string()))?,
    };
    let scheduler = scheduler_options(spec)?;
    let Some(next_millis) = first_millis(spec, &scheduler, now)? else {
        return Ok(None);
    };
    let first = IterationOptions {
        base: template.clone(),
        repeat: scheduler.first_repeat(),
        scheduler_id: &spec.id,
        next_millis,
        now,
    };
    let iteration = conn
        .call(&AddJobScheduler {
            keys,
            scheduler: &scheduler,
            data: &data,
            template: &template,
            first: &first,
        })
        .await?;
    info!(queue = %keys.name(), scheduler = %spec.id, job_id = %iteration.job_id,
        delay = iteration.delay, "job scheduler upserted");
    Ok(Some(iteration))
}

/// Template options as Node stores them: queue defaults under the template's,
/// and no implicit `attempts` (they skip the Job constructor).
fn template_options(defaults: &JobOptions, own: &JobOptions) -> Result<Map<String, Json>> {
    let mut template = defaults.to_stored();
    if defaults.attempts.is_none() {
        template.remove(opt::ATTEMPTS);
    }
    for (k, v) in own.to_stored() {
        if k == opt::ATTEMPTS && own.attempts.is_none() {
            continue;
        }
        template.insert(k, v);
    }
    JobOptions::from_stored(&template).validate()?;
    Ok(template)
}

/// The scheduler hash's options; the job name defaults to the scheduler id.
fn scheduler_options(spec: &SchedulerSpec) -> Result<SchedulerOptions> {
    let name = spec
        .template
        .name
        .clone()
        .unwrap_or_else(|| spec.id.clone());
    if name.is_empty() {
        return Err(ValidationError::EmptyJobName.into());
    }
    let mut o = SchedulerOptions {
        name,
        limit: spec.limit,
        start_date: spec.start_date,
        end_date: spec.end_date,
        ..Default::default()
    };
    match &spec.repeat {
        Repeat::Every { ms, offset } => {
            o.every = Some(*ms);
            o.offset = offset.filter(|o| *o > 0);
        }
        Repeat::Cron { pattern, tz } => {
            o.pattern = Some(pattern.clone());
            o.tz = tz.clone();
        }
    }
    Ok(o)
}

/// The first iteration's millis: `Some(None)` for every schedulers (the
/// script picks the slot), `None` when a cron pattern has no occurrence
/// left.
fn first_millis(
    spec: &SchedulerSpec,
    sched: &SchedulerOptions,
    now: u64,
) -> Result<Option<Option<u64>>, Error> {
    let Some(pattern) = &sched.pattern else {
        return Ok(Some(None));
    };
    let next = if spec.immediately {
        Some(now as i64)
    } else {
        CronSchedule::new(pattern, sched.tz.as_deref())?.next_after(
            now as i64,
            spec.start_date.map(|s| s as i64),
            spec.end_date.map(|e| e as i64),
        )
    };
    Ok(next.map(|n| Some((n.max(0) as u64).max(now))))
}
