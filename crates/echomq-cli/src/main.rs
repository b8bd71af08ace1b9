//! `echomq`: the operator's command for EchoMQ queues.
//!
//! Every command validates its arguments before connecting, so a bad argument
//! never writes anything. Errors are one line on stderr and a non-zero exit.

mod cli;
mod commands;
mod demo;
mod demo_flow;
mod flows;
mod style;
mod work;

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = cli::Cli::parse();
    if let Err(e) = commands::run(cli).await {
        anstream::eprintln!(
            "{}error:{} {e}",
            style::ERR.render(),
            style::ERR.render_reset()
        );
        std::process::exit(1);
    }
}
