//! F37–F40: streams, cluster, network.

use super::{Ctx, Row};

/// F37.
pub async fn f37(_ctx: Ctx) -> Row {
    Row::not_run("F37", "", "todo")
}

/// F38.
pub async fn f38(_ctx: Ctx) -> Row {
    Row::not_run("F38", "", "todo")
}

/// F39.
pub async fn f39(_ctx: Ctx) -> Row {
    Row::not_run("F39", "", "todo")
}

/// F40.
pub async fn f40(_ctx: Ctx) -> Row {
    Row::not_run("F40", "", "todo")
}

/// F40b.
pub async fn f40b(_ctx: Ctx) -> Row {
    Row::not_run("F40b", "", "todo")
}
