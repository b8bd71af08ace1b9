//! Every test of this crate in one binary (one link, one artifact on disk);
//! a file per topic, each a module: `cargo test -p <crate> --test suite <module>::`.

mod frozen;
mod names;
mod properties;
mod targets;
