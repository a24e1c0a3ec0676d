//! What `sealink trust check --json` prints: one [`TrustCheck`] object, for a good trust file
//! (`ok: true`, its entries) and for a bad one (`ok: false`, `error` saying what and where;
//! the command still exits 1).

use std::path::Path;

use base64::Engine as _;

use crate::error::{KeyFileError, TrustProblem};
use crate::trust::TrustFile;

/// The check of one trust file. Field names are the schema; keys in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrustCheck {
    /// The file checked, as given.
    pub path: String,
    /// Whether the file was read, is safe from other users and parses.
    pub ok: bool,
    /// Trusted owners (Ed25519 keys), in file order; empty when not `ok`.
    pub owners: Vec<TrustEntry>,
    /// Trusted hosts (X25519 keys), in file order; empty when not `ok`.
    pub hosts: Vec<TrustEntry>,
    /// Why the file is not usable; `null` when `ok`.
    pub error: Option<TrustFinding>,
}

/// One `owner NAME KEY` or `host NAME KEY` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrustEntry {
    pub name: String,
    pub key: String,
}

/// What is wrong with a trust file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrustFinding {
    /// `not_found` (no such file), `io` (cannot be read, or too large), `insecure` (others
    /// could have written it or its directory), `entry` (a line does not parse; see `line`
    /// and `problem`), or `other`.
    pub kind: String,
    /// The 1-based line of an `entry` finding.
    pub line: Option<usize>,
    /// For `entry`: `unknown_kind`, `wrong_field_count`, `bad_name`, `bad_base64`,
    /// `wrong_length`, `weak_key` or `duplicate_name`.
    pub problem: Option<String>,
    /// The message `sealink trust check` prints without `--json`.
    pub message: String,
}

impl TrustProblem {
    /// The problem's name in [`TrustFinding::problem`].
    pub fn code(&self) -> &'static str {
        match self {
            TrustProblem::UnknownKind(_) => "unknown_kind",
            TrustProblem::WrongFieldCount { .. } => "wrong_field_count",
            TrustProblem::BadName(_) => "bad_name",
            TrustProblem::BadBase64(_) => "bad_base64",
            TrustProblem::WrongLength(_) => "wrong_length",
            TrustProblem::WeakKey(_) => "weak_key",
            TrustProblem::DuplicateName { .. } => "duplicate_name",
        }
    }
}

impl TrustFinding {
    /// The finding for an error [`crate::read_trust`] returned.
    pub fn of(e: &KeyFileError) -> Self {
        let (kind, line, problem) = match e {
            KeyFileError::NotFound { .. } => ("not_found", None, None),
            KeyFileError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
                ("not_found", None, None)
            }
            KeyFileError::Io { .. } => ("io", None, None),
            KeyFileError::Insecure(_) => ("insecure", None, None),
            KeyFileError::Trust { line, problem, .. } => {
                ("entry", Some(*line), Some(problem.code().to_owned()))
            }
            _ => ("other", None, None),
        };
        TrustFinding {
            kind: kind.to_owned(),
            line,
            problem,
            message: e.to_string(),
        }
    }
}

fn entries(list: &[(String, [u8; 32])]) -> Vec<TrustEntry> {
    list.iter()
        .map(|(name, key)| TrustEntry {
            name: name.clone(),
            key: base64::engine::general_purpose::STANDARD.encode(key),
        })
        .collect()
}

impl TrustCheck {
    /// The check of `path` from what reading it gave.
    pub fn of(path: &Path, read: &Result<TrustFile, KeyFileError>) -> Self {
        let path = path.display().to_string();
        match read {
            Ok(t) => TrustCheck {
                path,
                ok: true,
                owners: entries(&t.owners),
                hosts: entries(&t.hosts),
                error: None,
            },
            Err(e) => TrustCheck {
                path,
                ok: false,
                owners: Vec::new(),
                hosts: Vec::new(),
                error: Some(TrustFinding::of(e)),
            },
        }
    }

    /// The check as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        // Only strings, integers, booleans and null: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
