//! F27–F30: scale, contention and schedulers.

use super::{Ctx, Row};

/// F27.
pub async fn f27(_ctx: Ctx) -> Row {
    Row::not_run("F27", "", "todo")
}

/// F28.
pub async fn f28(_ctx: Ctx) -> Row {
    Row::not_run("F28", "", "todo")
}

/// F29.
pub async fn f29(_ctx: Ctx) -> Row {
    Row::not_run("F29", "", "todo")
}

/// F30.
pub async fn f30(_ctx: Ctx) -> Row {
    Row::not_run("F30", "", "todo")
}
