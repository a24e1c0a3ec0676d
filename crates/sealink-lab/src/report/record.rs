//! [`RunRecord`]: the JSON record of one bench run (schema in the module doc of `report`), and
//! the facts about this machine and run that the benches also print.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{Chart, Table, write_file};
use crate::error::{Error, Result};

/// Version of the record's layout; bumped when a field changes meaning or goes away.
pub const SCHEMA: u32 = 1;

/// One summary figure of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    /// `None` (JSON `null`) when the value was not finite (nothing measured, or a ratio to 0).
    pub value: Option<f64>,
    pub unit: String,
}

/// What one bench run was, where and when it ran, what it wrote and what it found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// [`SCHEMA`].
    pub schema: u32,
    /// `seal`, `crypto`, `stacks`, `socket` or `datagram`; the record is `<bench>.json`.
    pub bench: String,
    /// [`git_commit`] where the bench ran.
    pub git_commit: String,
    /// [`cpu_model`].
    pub cpu_model: String,
    /// [`cores`].
    pub cores: usize,
    /// When the record was made, UTC, RFC 3339 to the second ([`now`]).
    pub date: String,
    /// The process's arguments, the program first.
    pub command_line: Vec<String>,
    /// Files the run wrote beside the record, by name.
    pub files: Vec<String>,
    /// The run's headline figures.
    pub summary: Vec<Figure>,
}

impl RunRecord {
    /// A record for `bench` run now by this process, on this machine, from this checkout.
    pub fn new(bench: &str) -> Self {
        RunRecord {
            schema: SCHEMA,
            bench: bench.to_owned(),
            git_commit: git_commit(),
            cpu_model: cpu_model(),
            cores: cores(),
            date: now().to_string(),
            command_line: std::env::args().collect(),
            files: Vec::new(),
            summary: Vec::new(),
        }
    }

    /// Notes a file the run wrote (its name, relative to the record's directory).
    pub fn file(&mut self, name: impl Into<String>) {
        self.files.push(name.into());
    }

    /// Adds a summary figure; a value that is not finite is recorded as `null`.
    pub fn figure(&mut self, name: impl Into<String>, value: f64, unit: &str) {
        self.summary.push(Figure {
            name: name.into(),
            value: value.is_finite().then_some(value),
            unit: unit.to_owned(),
        });
    }

    /// Writes `table` as CSV to `dir/name` and notes the file; returns its path.
    pub fn write_csv(&mut self, dir: &Path, name: &str, table: &Table) -> Result<PathBuf> {
        let path = dir.join(name);
        table.write_csv(&path)?;
        self.file(name);
        Ok(path)
    }

    /// Writes `chart` as SVG to `dir/name` and notes the file.
    pub fn write_svg(&mut self, dir: &Path, name: &str, chart: &Chart) -> Result<()> {
        chart.write_svg(&dir.join(name))?;
        self.file(name);
        Ok(())
    }

    /// Writes `text` (a markdown report) to `dir/name` and notes the file; returns its path.
    pub fn write_text(&mut self, dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
        let path = dir.join(name);
        write_file(&path, text)?;
        self.file(name);
        Ok(path)
    }

    /// The record as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String> {
        let mut s = serde_json::to_string_pretty(self)
            .map_err(|e| Error::bench_by("cannot encode the run record", e))?;
        s.push('\n');
        Ok(s)
    }

    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::bench_by("not a run record", e))
    }

    /// Writes the record to `dir/<bench>.json`, creating `dir`; returns the path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(format!("{}.json", self.bench));
        write_file(&path, &self.to_json()?)?;
        Ok(path)
    }
}

/// The commit checked out where the bench runs (`git rev-parse --short HEAD`), "unknown" when
/// that is not a git checkout or git is missing.
pub fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The CPU's "model name" from /proc/cpuinfo, "unknown" where there is none.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split_once(':')?
                        .1
                        .trim()
                        .to_owned(),
                )
            })
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Cores this process may run on (0 if the system does not say).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// Now, to the second, in UTC.
pub fn now() -> jiff::Timestamp {
    let t = jiff::Timestamp::now();
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// `t` as "YYYY-MM-DD HH:MM UTC", the form the benches print.
pub fn utc_minutes(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_json() {
        let mut r = RunRecord::new("socket");
        r.file("socket.csv");
        r.figure("integrated 16k Gbit/s", 12.5, "Gbit/s");
        r.figure("improvement vs library", f64::NAN, "%");
        // Needs all 17 digits: parsed back exactly only with serde_json's float_roundtrip.
        r.figure("ratio", 0.23280010206811122, "ratio");
        let json = r.to_json().unwrap();
        let back = RunRecord::from_json(&json).unwrap();
        assert_eq!(back, r);
        // The fields a reader relies on, by name.
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["bench"], "socket");
        assert_eq!(v["files"][0], "socket.csv");
        assert_eq!(v["summary"][0]["value"], 12.5);
        assert!(v["summary"][1]["value"].is_null());
        assert_eq!(v["cores"], cores());
        assert!(!v["git_commit"].as_str().unwrap().is_empty());
        assert!(v["command_line"][0].as_str().is_some());
        // The date is RFC 3339 UTC and parses back.
        let date: jiff::Timestamp = back.date.parse().unwrap();
        assert!(
            (date.as_second() - now().as_second()).abs() < 60,
            "{}",
            back.date
        );
        assert!(back.date.ends_with('Z'), "{}", back.date);
    }

    #[test]
    fn record_written_beside_the_csv() {
        let dir = std::env::temp_dir().join(format!("sealink-report-rec-{}", std::process::id()));
        let r = RunRecord::new("seal");
        let path = r.write(&dir).unwrap();
        assert_eq!(path, dir.join("seal.json"));
        let back = RunRecord::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, r);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(RunRecord::from_json("{\"schema\": 1}").is_err());
    }

    #[test]
    fn calendar_date() {
        // 2000-02-29 is a leap day; 1_700_000_000 is 2023-11-14 22:13:20 UTC.
        let t = jiff::Timestamp::from_second(951_782_400).unwrap();
        assert_eq!(utc_minutes(t), "2000-02-29 00:00 UTC");
        let t = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(utc_minutes(t), "2023-11-14 22:13 UTC");
        assert_eq!(t.to_string(), "2023-11-14T22:13:20Z");
    }
}
