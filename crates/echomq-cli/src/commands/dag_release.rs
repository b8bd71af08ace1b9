//! `echomq dag-release <queue>…`: hands finished DAG nodes of these queues to
//! their extra parents (docs/flows.md §DAGs), whoever finished them — for a
//! fleet whose workers are BullMQ Node ones, or that runs no EchoMQ process
//! with a releaser. Runs until Ctrl-C or SIGTERM.

use std::time::Duration;

use echomq::flow_producer::{DagReleaser, DagReleaserArgs, DagReleaserMsg};
use echomq::Connection;
use ractor::{Actor, ActorRef};

use super::Res;
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The queues holding nodes that several nodes wait for.
    #[arg(required = true)]
    queues: Vec<String>,
    /// Time between two walks of each queue's pending nodes (the backstop
    /// for finishes whose events were missed), in ms.
    #[arg(long, default_value_t = 5000)]
    sweep_ms: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    for q in &a.queues {
        echomq::protocol::QueueKeys::new(&t.prefix, q)?;
    }
    let conn = Connection::connect(t.config.clone()).await?;
    let mut stop = super::StopSignals::arm();
    let mut releasers: Vec<ActorRef<DagReleaserMsg>> = Vec::new();
    let (died, mut death) = tokio::sync::mpsc::channel::<()>(1);
    for q in &a.queues {
        let args = DagReleaserArgs::new(conn.clone(), q.clone())
            .sweep_interval(Duration::from_millis(a.sweep_ms));
        let (r, handle) = Actor::spawn(None, DagReleaser, args).await?;
        let died = died.clone();
        tokio::spawn(async move {
            let _ = handle.await;
            let _ = died.send(()).await;
        });
        releasers.push(r);
    }
    anstream::println!(
        "{} {} (Ctrl-C to stop)",
        paint(style::BOLD, "releasing DAG nodes of"),
        a.queues.join(", ")
    );
    tokio::select! {
        _ = death.recv() => {
            conn.close().await;
            return Err("a DAG releaser stopped".into());
        }
        _ = stop.recv() => {}
    }
    for r in &releasers {
        r.stop(None);
    }
    conn.close().await;
    Ok(())
}
