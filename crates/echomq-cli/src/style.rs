//! Terminal styles; anstream strips them when stdout is not a terminal.

use anstyle::{AnsiColor, Color, Style};

const fn fg(c: AnsiColor) -> Style {
    Style::new().fg_color(Some(Color::Ansi(c)))
}

pub const ERR: Style = fg(AnsiColor::Red).bold();
pub const DIM: Style = fg(AnsiColor::BrightBlack);
pub const GOOD: Style = fg(AnsiColor::Green);
pub const BAD: Style = fg(AnsiColor::Red);
pub const WARN: Style = fg(AnsiColor::Yellow);
pub const INFO: Style = fg(AnsiColor::Cyan);
pub const BOLD: Style = Style::new().bold();

/// The style of an event name.
pub fn for_event(name: &str) -> Style {
    match name {
        "completed" => GOOD,
        "failed" | "retries-exhausted" | "removed" => BAD,
        "stalled" | "delayed" | "paused" => WARN,
        "active" | "progress" => INFO,
        _ => DIM,
    }
}

/// `text` in `style`.
pub fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{}{text}{}", style.render(), style.render_reset())
}

/// One `warning: …` line on stderr.
pub fn print_warning(message: &str) {
    anstream::eprintln!("{}warning:{} {message}", ERR.render(), ERR.render_reset());
}

/// One `error: …` line on stderr.
pub fn print_error(message: &str) {
    anstream::eprintln!("{}error:{} {message}", ERR.render(), ERR.render_reset());
}
