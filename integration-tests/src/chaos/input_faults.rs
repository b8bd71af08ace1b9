//! F31–F36: bad input and racing admin operations.

use super::{Ctx, Row};

/// F31.
pub async fn f31(_ctx: Ctx) -> Row {
    Row::not_run("F31", "", "todo")
}

/// F32.
pub async fn f32(_ctx: Ctx) -> Row {
    Row::not_run("F32", "", "todo")
}

/// F33.
pub async fn f33(_ctx: Ctx) -> Row {
    Row::not_run("F33", "", "todo")
}

/// F34.
pub async fn f34(_ctx: Ctx) -> Row {
    Row::not_run("F34", "", "todo")
}

/// F35.
pub async fn f35(_ctx: Ctx) -> Row {
    Row::not_run("F35", "", "todo")
}

/// F36.
pub async fn f36(_ctx: Ctx) -> Row {
    Row::not_run("F36", "", "todo")
}
