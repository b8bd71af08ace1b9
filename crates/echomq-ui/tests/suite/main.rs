//! Every test of this crate in one binary (one link, one artifact on disk);
//! a file per topic, each a module: `cargo test -p <crate> --test suite <module>::`.

mod bounded_ui;
mod browser;
mod budget_line;
mod bull_board;
mod codec_view;
mod dag_view;
mod dashboard;
mod dead_letters_panel;
mod groups_panel;
mod relay_panel;
mod support;
