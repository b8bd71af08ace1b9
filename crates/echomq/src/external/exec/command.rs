//! What to start as a handler process: a program and its arguments (from a
//! command line split as a POSIX shell would, with no shell run), the
//! environment changes and the working directory; and the pool's options.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The command each handler process of an
/// [`ExecProcessor`](super::pool::ExecProcessor) runs.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecCommand {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    pub(crate) cwd: Option<PathBuf>,
}

impl fmt::Debug for ExecCommand {
    // The environment may hold secrets: only the names of the variables.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(k, _)| k).collect();
        f.debug_struct("ExecCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &env)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// A command line that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// Nothing to run.
    #[error("the handler command is empty")]
    Empty,
    /// A quote is not closed, or a backslash ends the line.
    #[error("the handler command {0:?} has an unclosed quote or a trailing backslash")]
    Unbalanced(String),
}

impl ExecCommand {
    /// `program` with no arguments.
    pub fn new(program: impl Into<OsString>) -> Self {
        ExecCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// Splits `line` into words as a POSIX shell would (quotes and
    /// backslashes; no variables, globs or pipes, since no shell runs: use
    /// `sh -c '…'` for those): `python3 handler.py --fast`.
    pub fn parse(line: &str) -> Result<Self, CommandError> {
        let words = shlex::split(line).ok_or_else(|| CommandError::Unbalanced(line.to_owned()))?;
        let mut words = words.into_iter();
        let program = words.next().ok_or(CommandError::Empty)?;
        Ok(ExecCommand {
            program: program.into(),
            args: words.map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// Appends an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets a variable in the handler's environment (the rest is inherited).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Removes a variable from the handler's environment.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env.push((key.into(), None));
        self
    }

    /// The handler's working directory (default: the worker's).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The program, for messages.
    pub fn program(&self) -> &std::ffi::OsStr {
        &self.program
    }
}

/// How an [`ExecProcessor`](super::pool::ExecProcessor) runs its handlers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecOptions {
    /// Handler processes kept (default 1): give the worker's concurrency, so
    /// that each slot has its own. With fewer, jobs wait for a free process
    /// (their locks renewed meanwhile).
    pub processes: usize,
    /// After SIGTERM, how long a cancelled handler has to exit before its
    /// process group is sent SIGKILL (default 500 ms). Keep it under the
    /// worker's `cancel_grace` (1 s), so that the process is gone before the
    /// slot is given up.
    pub kill_grace: Duration,
    /// The longest line a handler may print on stdout (default 64 MiB); a
    /// longer one fails the job as garbage.
    pub max_line_bytes: usize,
    /// Stderr lines longer than this (default 8 KiB) are cut in the log.
    pub max_stderr_line_bytes: usize,
    /// A handler that exits within [`ExecOptions::early_exit`] of its start
    /// without answering a job counts as failing to start: the next start
    /// waits 100 ms, doubling up to this (default 5 s), so that a broken
    /// handler does not burn through every job's attempts in a hot loop.
    pub max_restart_delay: Duration,
    /// See [`ExecOptions::max_restart_delay`] (default 1 s).
    pub early_exit: Duration,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            processes: 1,
            kill_grace: Duration::from_millis(500),
            max_line_bytes: 64 << 20,
            max_stderr_line_bytes: 8 << 10,
            max_restart_delay: Duration::from_secs(5),
            early_exit: Duration::from_secs(1),
        }
    }
}

impl ExecOptions {
    /// The number of handler processes.
    pub fn processes(mut self, n: usize) -> Self {
        self.processes = n;
        self
    }

    /// The SIGTERM → SIGKILL grace of a cancelled handler.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_splits_like_a_shell_without_running_one() {
        let c = ExecCommand::parse(r#"python3 "my handler.py" --x='a b' \$HOME"#).unwrap();
        assert_eq!(c.program, "python3");
        assert_eq!(c.args, ["my handler.py", "--x=a b", "$HOME"]);
        assert_eq!(ExecCommand::parse("  "), Err(CommandError::Empty));
        assert!(matches!(
            ExecCommand::parse("python3 'open"),
            Err(CommandError::Unbalanced(_))
        ));
        let c = ExecCommand::new("x").env("TOKEN", "secret");
        assert!(!format!("{c:?}").contains("secret"));
    }
}
