//! Every test of this crate in one binary (one link, one artifact on disk);
//! a file per topic, each a module: `cargo test -p <crate> --test suite <module>::`.

mod add_bulk_chunks;
mod add_bulk_names;
mod budget_cli;
mod cancel_cli;
mod capacity_cli;
mod chunked_cli;
mod cli;
mod codec_cli;
mod dag_cli;
mod diagnose;
mod dlq_cli;
mod groups_cli;
mod limits_dedup_search_cli;
mod max_jobs;
mod relay_cli;
mod ui_cli;
mod work_exec;
mod work_http_faults;
mod work_metrics;
mod work_observability;
mod work_service;
