//! F16–F26: faults of the redis-server.

use super::{Ctx, Row};

/// F16.
pub async fn f16(_ctx: Ctx) -> Row {
    Row::not_run("F16", "", "todo")
}

/// F17.
pub async fn f17(_ctx: Ctx) -> Row {
    Row::not_run("F17", "", "todo")
}

/// F18.
pub async fn f18(_ctx: Ctx) -> Row {
    Row::not_run("F18", "", "todo")
}

/// F19.
pub async fn f19(_ctx: Ctx) -> Row {
    Row::not_run("F19", "", "todo")
}

/// F20.
pub async fn f20(_ctx: Ctx) -> Row {
    Row::not_run("F20", "", "todo")
}

/// F21.
pub async fn f21(_ctx: Ctx) -> Row {
    Row::not_run("F21", "", "todo")
}

/// F22.
pub async fn f22(_ctx: Ctx) -> Row {
    Row::not_run("F22", "", "todo")
}

/// F23.
pub async fn f23(_ctx: Ctx) -> Row {
    Row::not_run("F23", "", "todo")
}

/// F24.
pub async fn f24(_ctx: Ctx) -> Row {
    Row::not_run("F24", "", "todo")
}

/// F25.
pub async fn f25(_ctx: Ctx) -> Row {
    Row::not_run("F25", "", "todo")
}

/// F26.
pub async fn f26(_ctx: Ctx) -> Row {
    Row::not_run("F26", "", "todo")
}
