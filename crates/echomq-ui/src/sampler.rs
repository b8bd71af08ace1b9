//! The sampler task: every few seconds, each queue of the prefix gets a
//! [`Sample`] in its series, from the live feed's tallies and its counts.

use std::sync::Arc;

use echomq::{JobCounts, Queue, QueueOptions};

use crate::discover;
use crate::series::Sample;
use crate::state::App;

/// Samples every queue of the prefix until the app is cancelled; a queue
/// that appears is watched by the live feed from then on.
pub(crate) async fn run_sampler(app: Arc<App>) {
    let mut tick = tokio::time::interval(app.config.sample_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = app.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let elapsed = last.elapsed().as_secs_f64().max(0.001);
        last = std::time::Instant::now();
        let names = match app
            .discovery
            .advance(&app.conn, discover::SAMPLER_BUDGET)
            .await
        {
            Ok(found) => found.names,
            Err(e) => {
                tracing::warn!(error = %e, "sampler: queue discovery failed");
                continue;
            }
        };
        for name in names {
            app.live.watch(&app.conn, &name).await;
            let counts = match open(&app, &name).await {
                Ok(q) => q.counts().await.unwrap_or_default(),
                Err(_) => JobCounts::default(),
            };
            let tally = app.live.take_tally(&name);
            let sample = Sample {
                at: echomq::clock::now_ms(),
                completed_per_s: tally.completed as f64 / elapsed,
                failed_per_s: tally.failed as f64 / elapsed,
                waiting: counts.waiting + counts.prioritized,
            };
            app.series.push(&name, sample, app.config.samples);
        }
    }
}

async fn open(app: &App, name: &str) -> echomq::Result<Queue> {
    Queue::with_options(
        &app.conn,
        name,
        QueueOptions::default().skip_meta_update(true),
    )
    .await
}
