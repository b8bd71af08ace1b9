//! EchoMQ embedded in an axum service: `POST /signups` adds a typed job,
//! `GET /counts` answers the queue's counts, and a worker set (Worker +
//! LockManager + StalledChecker) under the shipped `HostSupervisor` processes
//! the jobs. On SIGTERM (or Ctrl-C) the HTTP server stops first, letting
//! in-flight requests finish, then the worker set closes in order: running
//! jobs get up to 10 s while their locks are renewed, the rest go back to
//! `wait` for another worker.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example axum_service`, then
//! `curl -XPOST localhost:3000/signups -H 'content-type: application/json' -d '{"email":"ada@example.com"}'`.

use std::future::Future;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use echomq::queue::TypedQueue;
use echomq::{
    typed_processor, Connection, Host, JobOptions, ProcessError, Queue, TypedJob, WorkerArgs,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One sign-up, as the API takes it and the job carries it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Signup {
    pub email: String,
}

#[derive(Clone)]
struct App {
    signups: TypedQueue<Signup>,
}

async fn add_signup(
    State(app): State<App>,
    Json(signup): Json<Signup>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let options = JobOptions::new().attempts(3);
    match app.signups.add("signup", &signup, options).await {
        Ok(id) => Ok(Json(json!({ "id": id }))),
        // A refused job (bad input) or Redis away: one readable line.
        Err(e) => Err((StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

async fn counts(State(app): State<App>) -> Result<Json<Value>, (StatusCode, String)> {
    let c = app
        .signups
        .queue()
        .counts()
        .await
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    Ok(Json(json!({
        "waiting": c.waiting, "active": c.active, "completed": c.completed, "failed": c.failed,
    })))
}

/// Serves on `listener` until `shutdown` resolves, then closes the worker
/// set; answers how many jobs the close let finish and moved back.
pub async fn run(
    url: &str,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    let conn = Connection::connect_url(url).await?;
    let queue = Queue::new(&conn, "signups").await?;

    let host = Host::start().await?;
    let welcome = typed_processor(|job: TypedJob<Signup>| async move {
        // The real work: send the welcome mail, provision the account…
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok::<_, ProcessError>(json!({ "welcomed": job.data().email }))
    });
    let mut args = WorkerArgs::new(queue.clone(), welcome);
    args.options.concurrency = 4;
    host.add_worker(args).await?;

    let app = Router::new()
        .route("/signups", post(add_signup))
        .route("/counts", get(counts))
        .with_state(App {
            signups: queue.typed(),
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;

    // HTTP is down: no new jobs from here. Close the workers in order.
    let report = host.close(Duration::from_secs(10)).await?;
    let (mut finished, mut moved) = (0, 0);
    for (_, closed) in report.worker_sets {
        if let Some(w) = closed?.worker {
            finished += w.finished_in_time;
            moved += w.moved_back.len();
        }
    }
    conn.close().await;
    Ok((finished, moved))
}

/// SIGTERM (what an orchestrator sends) or Ctrl-C.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let listener = TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let (finished, moved) = run(&url, listener, terminated()).await?;
    println!("closed: {finished} jobs finished in time, {moved} moved back to wait");
    Ok(())
}
