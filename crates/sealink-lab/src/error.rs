//! Error plumbing for the command: a boxed error, context messages that keep their cause as
//! `source()`, and the one-line rendering `main` prints after "error: ".

use std::error::Error as StdError;
use std::fmt;

/// Any error, boxed.
pub type Error = Box<dyn StdError + Send + Sync + 'static>;
/// Result with a boxed error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A message explaining what was being done, with the error that stopped it as its source.
#[derive(Debug)]
pub struct Context {
    msg: String,
    source: Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl StdError for Context {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// Adds context to any error result.
pub trait ResultExt<T> {
    fn context(self, msg: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, msg: impl Into<String>) -> Result<T> {
        self.map_err(|e| {
            Box::new(Context {
                msg: msg.into(),
                source: e.into(),
            }) as Error
        })
    }
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| {
            Box::new(Context {
                msg: f().into(),
                source: e.into(),
            }) as Error
        })
    }
}

/// An error from a plain message.
pub fn msg(m: impl Into<String>) -> Error {
    m.into().into()
}

/// The error and its causes on one line: `outer: cause: root cause`. A cause whose text the
/// outer message already contains is not repeated.
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_joins_causes_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let r: std::result::Result<(), _> = Err(io);
        let e = r
            .context("reading x")
            .context("loading config")
            .unwrap_err();
        assert_eq!(chain(&*e), "loading config: reading x: gone");
        let e = msg("plain");
        assert_eq!(chain(&*e), "plain");
    }
}
