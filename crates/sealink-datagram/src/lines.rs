//! A delivered message as `sealink msg listen` prints it: one text line (`OWNER@HOST [to DEST]
//! [SCOPE, N bytes]: TEXT`, bytes that are not printable as hex) or one JSON object a line.

use crate::{Delivery, Scope};

/// The name `msg` prints for a scope.
pub fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Encrypt => "encrypt",
        Scope::AuthOnly => "auth-only",
        Scope::None => "none",
    }
}

/// Printable as text: valid UTF-8 without control characters other than tab.
fn as_text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data)
        .ok()
        .filter(|s| !s.chars().any(|c| c.is_control() && c != '\t'))
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

impl Delivery {
    /// `OWNER@HOST [to DEST] [SCOPE, N bytes]: TEXT` and a newline; `hex:...` for bytes that
    /// are not printable text.
    pub fn text_line(&self) -> String {
        let to = self
            .to
            .as_deref()
            .map(|t| format!(" to {t}"))
            .unwrap_or_default();
        let body = match as_text(&self.data) {
            Some(t) => t.to_owned(),
            None => format!("hex:{}", hex(&self.data)),
        };
        format!(
            "{}@{}{to} [{}, {} bytes]: {body}\n",
            self.from,
            self.peer_name,
            scope_name(self.scope),
            self.data.len()
        )
    }

    /// One JSON object and a newline: `from`, `peer`, `to` (null: this host), `scope`, `bytes`,
    /// and `text` (UTF-8 without control characters but tab) or `hex`.
    pub fn json_line(&self) -> String {
        json_record(
            &self.from,
            &self.peer_name,
            self.to.as_deref(),
            self.scope,
            &self.data,
        )
    }
}

/// The fields in the order the hand-built line had them.
#[derive(serde::Serialize)]
struct JsonRecord<'a> {
    from: &'a str,
    peer: &'a str,
    to: Option<&'a str>,
    scope: &'static str,
    bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

fn json_record(from: &str, peer: &str, to: Option<&str>, scope: Scope, data: &[u8]) -> String {
    let text = as_text(data);
    let rec = JsonRecord {
        from,
        peer,
        to,
        scope: scope_name(scope),
        bytes: data.len(),
        text,
        hex: text.is_none().then(|| hex(data)),
    };
    // Strings and numbers only: serializing cannot fail.
    serde_json::to_string(&rec).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes() {
        // Quotes, backslashes and names that are not plain ASCII must come back as sent, and
        // binary data as hex.
        let from = "al\"ice\\ \u{e9}\u{1f600}";
        let line = json_record(from, "b\"\\", None, Scope::Encrypt, b"say \"hi\" \\o/\t");
        assert!(
            line.ends_with('\n') && !line[..line.len() - 1].contains('\n'),
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["from"], from);
        assert_eq!(v["peer"], "b\"\\");
        assert!(v["to"].is_null());
        assert_eq!(v["scope"], "encrypt");
        assert_eq!(v["text"], "say \"hi\" \\o/\t");
        assert_eq!(v["bytes"], 13);
        let binary = b"\xff\xfe\"\\\n\x00";
        let v: serde_json::Value = serde_json::from_str(&json_record(
            "a",
            "b",
            Some("c\u{1}"),
            Scope::AuthOnly,
            binary,
        ))
        .unwrap();
        assert_eq!(v["hex"], hex(binary));
        assert!(v.get("text").is_none());
        assert_eq!(v["to"], "c\u{1}");
        assert_eq!(v["bytes"], binary.len());
        assert_eq!(as_text(b"hi\tthere"), Some("hi\tthere"));
        assert_eq!(as_text(b"\x00\xff"), None);
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }
}
