//! How the commands print what they have to say: errors as one line,
//! names and identities with control characters escaped, ages, and
//! aligned tables.

use std::{
    borrow::Cow,
    time::{Duration, SystemTime},
};

/// An error and its sources on one line, `: `-separated; a source whose
/// text the line already holds is left out.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// `text` with control characters (and the invisible characters that
/// reorder or hide text) written as Rust escapes: `\n`, `\t`, `\u{1b}`.
pub fn printable(text: &str) -> Cow<'_, str> {
    fn hidden(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// An mTLS identity as printed: `-` when there is none.
pub fn identity(identity: &str) -> Cow<'_, str> {
    if identity.is_empty() {
        Cow::Borrowed("-")
    } else {
        printable(identity)
    }
}

/// `2m13s`-style age of an RFC 3339 time, or `?` if it cannot be read.
pub fn age(rfc3339: &str, now: SystemTime) -> String {
    match humantime::parse_rfc3339(rfc3339) {
        Ok(then) => {
            let elapsed = now.duration_since(then).unwrap_or_default();
            humantime::format_duration(Duration::from_secs(elapsed.as_secs())).to_string()
        }
        Err(_) => "?".to_owned(),
    }
}

/// Left-aligned columns separated by two spaces; a header row unless every
/// header is empty.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, width) in cells.zip(&widths) {
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    if headers.iter().any(|h| !h.is_empty()) {
        line(&mut headers.iter().copied());
    }
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("plain/name é"), "plain/name é");
        assert_eq!(printable("a\nb\tc\u{1b}[2J"), "a\\nb\\tc\\u{1b}[2J");
        assert_eq!(printable("left\u{202e}right"), "left\\u{202e}right");
        assert_eq!(identity(""), "-");
        assert_eq!(identity("id\r"), "id\\r");
    }

    #[test]
    fn an_error_chain_is_one_line_without_repeats() {
        let inner = std::io::Error::other("boom");
        let outer = std::io::Error::other(Wrapper(inner));
        assert_eq!(chain(&outer), "wrapped: boom");
    }

    #[derive(Debug)]
    struct Wrapper(std::io::Error);

    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
