//! The glob language of ACL rules and of the admin API's `?match=`.
//!
//! Written by hand on purpose: it is a few lines, and no general-purpose glob
//! crate has exactly these semantics (most stop `*` at `/`, match bytes
//! rather than characters, or add classes and braces):
//!
//! - `*` matches any run of characters, **including `/`** and the empty run;
//! - `?` matches exactly one character (a Unicode scalar value, not a byte);
//! - every other character matches itself; there is no escaping, no class,
//!   no brace;
//! - the pattern must match the whole string; case-sensitive; no
//!   normalisation of either side.

use std::fmt;

/// One element of a compiled pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: exactly one character.
    One,
    /// Any other character: itself.
    Literal(char),
}

/// A compiled glob pattern.
///
/// ```
/// use monolock_server::Glob;
///
/// let glob = Glob::new("nightly/*");
/// assert!(glob.matches("nightly/import"));
/// assert!(glob.matches("nightly/a/b")); // `*` crosses `/`
/// assert!(!glob.matches("Nightly/import")); // case-sensitive
/// assert!(Glob::new("shard-?").matches("shard-é")); // one character, two bytes
/// assert!(!Glob::new("shard-?").matches("shard-31"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

impl Glob {
    /// Compiles `pattern`. Every string is a valid pattern.
    pub fn new(pattern: &str) -> Self {
        let mut tokens = Vec::with_capacity(pattern.len());
        for c in pattern.chars() {
            let token = match c {
                '*' => Token::Star,
                '?' => Token::One,
                c => Token::Literal(c),
            };
            // `**` means the same as `*`; keeping one makes matching linear
            // in the common cases.
            if token == Token::Star && tokens.last() == Some(&Token::Star) {
                continue;
            }
            tokens.push(token);
        }
        Self {
            source: pattern.to_owned(),
            tokens,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True if the pattern matches the whole of `text`.
    ///
    /// The classic two-cursor algorithm: walk pattern and text together;
    /// on a `*`, remember where it was and first let it match nothing; on a
    /// mismatch, go back to the last `*` and let it swallow one more
    /// character. Only the last `*` ever needs revisiting, so this is
    /// O(pattern x text) at worst and allocates nothing.
    pub fn matches(&self, text: &str) -> bool {
        let tokens = &self.tokens;
        let mut p = 0; // next token
        let mut t = 0; // byte offset of the next character of `text`
        // The last `*` seen: the token after it, and the text offset it
        // will swallow up to next time we backtrack.
        let mut star: Option<(usize, usize)> = None;
        loop {
            let next_char = text[t..].chars().next();
            match (tokens.get(p), next_char) {
                (Some(Token::Star), _) => {
                    p += 1;
                    star = Some((p, t));
                    continue;
                }
                (Some(Token::One), Some(c)) => {
                    p += 1;
                    t += c.len_utf8();
                    continue;
                }
                (Some(Token::Literal(l)), Some(c)) if *l == c => {
                    p += 1;
                    t += c.len_utf8();
                    continue;
                }
                (None, None) => return true,
                _ => {}
            }
            // Mismatch (or one side ran out): let the last `*` take one more
            // character and retry from just after it.
            match star {
                Some((after_star, swallowed)) => {
                    let Some(c) = text[swallowed..].chars().next() else {
                        return false;
                    };
                    let swallowed = swallowed + c.len_utf8();
                    star = Some((after_star, swallowed));
                    p = after_star;
                    t = swallowed;
                }
                None => return false,
            }
        }
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.source, f)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn literal_star_and_one() {
        let cases: &[(&str, &str, bool)] = &[
            ("", "", true),
            ("", "a", false),
            ("*", "", true),
            ("*", "a/b/c", true),
            ("a", "a", true),
            ("a", "A", false),
            ("a", "ab", false),
            ("ab", "a", false),
            ("?", "", false),
            ("?", "a", true),
            ("?", "ab", false),
            ("?", "€", true),
            ("??", "€", false),
            ("a*b", "ab", true),
            ("a*b", "a/x/b", true),
            ("a*b", "a/x/bc", false),
            ("a*b*c", "abbbc", true),
            ("a*b*c", "acb", false),
            ("*a", "bbba", true),
            ("**a**", "a", true),
            ("nightly/*", "nightly/", true),
            ("nightly/*", "nightly", false),
            ("shard-?", "shard-3", true),
            ("shard-?", "shard-31", false),
            ("x?z", "x/z", true),
            (" a", "a", false),
            ("é", "e\u{301}", false), // no normalisation
        ];
        for &(pattern, text, expected) in cases {
            assert_eq!(
                Glob::new(pattern).matches(text),
                expected,
                "{pattern:?} vs {text:?}"
            );
        }
    }

    /// A slow, obviously correct reference: recursion over characters.
    fn reference(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => (0..=text.len()).any(|skip| reference(rest, &text[skip..])),
            Some(('?', rest)) => !text.is_empty() && reference(rest, &text[1..]),
            Some((c, rest)) => text.first() == Some(c) && reference(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference(pattern in "[ab*?/é]{0,8}", text in "[ab/é]{0,10}") {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            prop_assert_eq!(Glob::new(&pattern).matches(&text), reference(&p, &t));
        }
    }
}
