//! [`PointLog`]: a CSV file that receives each result the moment it is measured (issue 32), so a
//! run that is stopped early (Ctrl-C, a kill, a lent machine taken back) keeps every point it
//! measured. The benches still write their report files at the end, as before; the log is the
//! record of a run that did not get there.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};

/// A CSV file written row by row: the header when it is created, then each row with its own
/// `write` as soon as it is appended (no buffer in the process: a killed process loses nothing
/// it appended). A first column, `elapsed_s`, gives the seconds since the log was created, so
/// a stopped run also says what each point cost.
#[derive(Debug)]
pub struct PointLog {
    path: PathBuf,
    file: File,
    width: usize,
    start: Instant,
    rows: usize,
}

/// One CSV line (RFC 4180 quoting through the csv crate), newline included.
fn csv_line<S: AsRef<[u8]>>(cells: impl IntoIterator<Item = S>) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(cells)
        .map_err(|e| Error::bench_by("cannot write a CSV row", e))?;
    w.into_inner()
        .map_err(|e| Error::bench_by("cannot finish a CSV row", e.into_error()))
}

impl PointLog {
    /// Creates (or truncates) `dir/name`, creating `dir`, and writes the header: `elapsed_s`
    /// then `head`.
    pub fn create<S: AsRef<str>>(
        dir: &Path,
        name: &str,
        head: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
        let path = dir.join(name);
        let head: Vec<String> = std::iter::once("elapsed_s".to_owned())
            .chain(head.into_iter().map(|s| s.as_ref().to_owned()))
            .collect();
        let mut file = File::create(&path).map_err(Error::io("create", &path))?;
        file.write_all(&csv_line(&head)?)
            .map_err(Error::io("write", &path))?;
        Ok(PointLog {
            path,
            file,
            width: head.len() - 1,
            start: Instant::now(),
            rows: 0,
        })
    }

    /// Appends one row (as many cells as the header named) and hands it to the kernel at once.
    pub fn append<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) -> Result<()> {
        let cells: Vec<String> =
            std::iter::once(format!("{:.3}", self.start.elapsed().as_secs_f64()))
                .chain(cells.into_iter().map(|s| s.as_ref().to_owned()))
                .collect();
        if cells.len() != self.width + 1 {
            return Err(Error::bench(format!(
                "{}: a row of {} cells under a header of {}",
                self.path.display(),
                cells.len() - 1,
                self.width
            )));
        }
        self.file
            .write_all(&csv_line(&cells)?)
            .and_then(|()| self.file.flush())
            .map_err(Error::io("write", &self.path))?;
        self.rows += 1;
        Ok(())
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its file name, as a run record lists it.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    /// Rows appended so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Seconds since the log was created.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_is_on_disk_when_append_returns() {
        let dir = tempfile_dir();
        let mut log = PointLog::create(&dir, "p.csv", ["a", "b"]).unwrap();
        let read = || std::fs::read_to_string(dir.join("p.csv")).unwrap();
        assert_eq!(read(), "elapsed_s,a,b\n");
        log.append(["1", "x,y"]).unwrap();
        // Read back while the log is still open: nothing is held in the process.
        let text = read();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[1].ends_with(",1,\"x,y\""), "{text}");
        assert!(log.append(["only one"]).is_err());
        assert_eq!(log.rows(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "sealink-pointlog-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }
}
