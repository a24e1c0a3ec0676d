//! Plain markdown and CSV for the adp tables. Kept apart so a shared report module can take
//! its place later.

/// A table: a title, a header row and string cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Self {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// A GitHub-style markdown table under a `###` title; `|` in cells is escaped.
    pub fn markdown(&self) -> String {
        let cell = |s: &String| s.replace('|', "\\|");
        let line = |cells: &[String]| {
            let v: Vec<String> = cells.iter().map(cell).collect();
            format!("| {} |\n", v.join(" | "))
        };
        let mut out = format!("### {}\n\n", self.title);
        out += &line(&self.headers);
        out += &format!("|{}\n", "---|".repeat(self.headers.len()));
        for r in &self.rows {
            out += &line(r);
        }
        out.push('\n');
        out
    }

    /// RFC 4180 CSV: a header line, then the rows; cells with `,`, `"` or a newline quoted.
    pub fn csv(&self) -> String {
        let cell = |s: &String| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.clone()
            }
        };
        let mut out = String::new();
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            let v: Vec<String> = r.iter().map(cell).collect();
            out += &v.join(",");
            out.push('\n');
        }
        out
    }
}

/// A number with `d` decimals; "n/a" when not finite.
pub fn num(x: f64, d: usize) -> String {
    if x.is_finite() {
        format!("{x:.d$}")
    } else {
        "n/a".to_owned()
    }
}

/// ours / paper with two decimals.
pub fn ratio(ours: f64, paper: f64) -> String {
    num(ours / paper, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_csv() {
        let mut t = Table::new("T", &["a", "b"]);
        t.push(vec!["1|2".into(), "x,\"y\"".into()]);
        assert_eq!(
            t.markdown(),
            "### T\n\n| a | b |\n|---|---|\n| 1\\|2 | x,\"y\" |\n\n"
        );
        assert_eq!(t.csv(), "a,b\n1|2,\"x,\"\"y\"\"\"\n");
        assert_eq!(num(f64::NAN, 1), "n/a");
        assert_eq!(ratio(3.0, 2.0), "1.50");
    }
}
