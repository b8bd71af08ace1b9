//! `echomq ui`: serves the web dashboard (crate `echomq-ui`) until Ctrl-C or
//! SIGTERM.

use std::net::SocketAddr;

use echomq_ui::{AuthToken, UiConfig};

use crate::target::Target;

/// Options of `echomq ui` (the URL, prefix and TLS flags are the global ones).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on. Anything but a loopback address needs
    /// --auth-token.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
    bind: SocketAddr,
    /// Token required by every request (`Authorization: Bearer <token>`, or
    /// the login page, which sets an HttpOnly cookie); at least 16
    /// characters. Required off loopback.
    #[arg(
        long,
        env = "ECHOMQ_UI_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    auth_token: Option<AuthToken>,
    /// Hide every action; the server refuses action requests.
    #[arg(long)]
    read_only: bool,
    /// Keys a job page shows payloads stored through a codec with.
    #[command(flatten)]
    keys: crate::codec::KeyArgs,
}

/// Runs the dashboard; the exit code follows the other commands: 2 for a refused
/// setting, 3/4 for Redis, 1 otherwise.
pub(crate) async fn run(args: Args, cli: &Target) -> i32 {
    init_logs();
    let codec = match args.keys.options() {
        Ok(codec) => codec,
        Err(e) => {
            crate::style::print_error(&e);
            return 2;
        }
    };
    let config = UiConfig::default()
        .codec(codec)
        .bind(args.bind)
        .auth_token(args.auth_token.clone())
        .read_only(args.read_only);
    // Refuse a bad setting before connecting to anything.
    if let Err(e) = config.validate() {
        crate::style::print_error(&e.to_string());
        return 2;
    }
    let conn = match echomq::Connection::connect(cli.config.clone()).await {
        Ok(c) => c,
        Err(e) => {
            let d = echomq_cli::diagnose::diagnose(&e, Some(&cli.url));
            crate::style::print_error(&d.message);
            return d.class.exit_code();
        }
    };
    let mut stop = super::StopSignals::arm();
    let ui = match echomq_ui::start(conn.clone(), config).await {
        Ok(ui) => ui,
        Err(e) => {
            crate::style::print_error(&e.to_string());
            conn.close().await;
            return match e {
                echomq_ui::UiError::Config(_) => 2,
                _ => 1,
            };
        }
    };
    anstream::println!(
        "EchoMQ dashboard on {} (prefix {}{}); Ctrl-C stops it",
        ui.url(),
        cli.prefix,
        if args.read_only { ", read-only" } else { "" }
    );
    stop.recv().await;
    let code = match ui.shutdown().await {
        Ok(()) => 0,
        Err(e) => {
            crate::style::print_error(&e.to_string());
            1
        }
    };
    conn.close().await;
    code
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("echomq_ui=info,warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .ok();
}
