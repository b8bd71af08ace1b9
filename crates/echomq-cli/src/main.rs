//! `echomq`: the operator's command for EchoMQ queues.
//!
//! Every command validates its arguments before connecting, so a bad argument
//! never writes anything. Errors are one line on stderr and a non-zero exit:
//! 2 for a configuration error, 3 when Redis cannot be reached, 4 when it
//! refuses us or does not suit a queue, 1 for anything else
//! (`docs/deployment.md §Running as a service`).

mod bulk;
mod chunked;
mod cli;
mod commands;
mod dedup;
mod demo;
mod demo_flow;
mod flows;
mod groups;
mod limits;
mod otlp;
mod processors;
mod relay;
mod search;
mod service;
mod style;
mod synthetic;
mod target;
mod ui;
mod work;

use clap::{CommandFactory, FromArgMatches};

#[tokio::main]
async fn main() {
    let matches = cli::Cli::command().get_matches();
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.tls_insecure {
        style::print_warning("--tls-insecure: the server's TLS certificate is NOT verified");
    }
    if let cli::Command::Work(args) = &cli.command {
        let sources = service::GlobalSources::of(&matches);
        std::process::exit(service::main(&cli.target(), sources, args).await);
    }
    if let cli::Command::Ui(args) = &cli.command {
        std::process::exit(ui::main(&cli.target(), args).await);
    }
    if let cli::Command::Relay(cmd) = &cli.command {
        std::process::exit(relay::main(&cli.target(), cmd).await);
    }
    let url = cli.url.clone();
    if let Err(e) = commands::run(cli).await {
        // Errors of the runtime get their readable line and exit code.
        let code = match e.downcast_ref::<echomq::Error>() {
            Some(err) => {
                let d = echomq_cli::diagnose::diagnose(err, Some(&url));
                style::print_error(&d.message);
                d.class.exit_code()
            }
            None => {
                style::print_error(&e.to_string());
                1
            }
        };
        std::process::exit(code);
    }
}
