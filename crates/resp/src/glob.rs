//! Redis's glob patterns (`stringmatchlen`), as `CONFIG GET` takes them: `*` any run of bytes,
//! `?` any one byte, `[...]` one byte of a class (`^` first negates it, `a-z` a range, `\`
//! escapes), `\` the next byte as itself.
//!
//! A pattern is compiled once, in time proportional to its length, into tokens that each
//! match one byte or any run (runs of `*` are one token). A name is then matched in time
//! bounded by its own length alone: a pattern of more single-byte tokens than the name has
//! bytes cannot match it, and the others have at most twice as many tokens as it has bytes,
//! so a long pattern costs no more than a short one at each name.

/// The longest pattern `CONFIG GET` takes, in bytes: far more than any parameter name needs.
pub const MAX_PATTERN_BYTES: usize = 256;

/// One byte the pattern matches at one place: a set of the 256 byte values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ByteSet([u64; 4]);

impl ByteSet {
    const NONE: Self = Self([0; 4]);

    fn one(byte: u8) -> Self {
        let mut set = Self::NONE;
        set.insert(byte);
        set
    }

    fn insert(&mut self, byte: u8) {
        self.0[usize::from(byte >> 6)] |= 1 << (byte & 63);
    }

    fn contains(self, byte: u8) -> bool {
        self.0[usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }

    fn inverted(self) -> Self {
        Self(self.0.map(|word| !word))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `*`: any run of bytes, the empty one included.
    Star,
    /// One byte of the set.
    Byte(ByteSet),
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
    /// How many tokens match one byte each: the fewest bytes a name must have.
    single: usize,
}

impl Glob {
    /// Compiles `pattern` as Redis reads it.
    pub fn new(pattern: &[u8]) -> Self {
        let mut tokens = Vec::new();
        let mut at = 0;
        while let Some(&byte) = pattern.get(at) {
            at += 1;
            let token = match byte {
                b'*' => {
                    if tokens.last() == Some(&Token::Star) {
                        continue;
                    }
                    Token::Star
                }
                b'?' => Token::Byte(ByteSet::NONE.inverted()),
                b'[' => {
                    let (set, next) = class(pattern, at);
                    at = next;
                    Token::Byte(set)
                }
                b'\\' if at < pattern.len() => {
                    at += 1;
                    Token::Byte(ByteSet::one(pattern[at - 1]))
                }
                other => Token::Byte(ByteSet::one(other)),
            };
            tokens.push(token);
        }
        let single = tokens.iter().filter(|t| **t != Token::Star).count();
        Self { tokens, single }
    }

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &[u8]) -> bool {
        self.run(name).0
    }

    /// Whether `name` matches, and the steps taken: at most `(2n + 1) × n` for a name of
    /// `n` bytes, whatever the pattern's length. `matched[j]`: the tokens so far match the
    /// first `j` bytes of `name`.
    fn run(&self, name: &[u8]) -> (bool, usize) {
        if self.single > name.len() {
            return (false, 0);
        }
        let mut steps = 0;
        let mut matched = vec![false; name.len() + 1];
        matched[0] = true;
        for token in &self.tokens {
            steps += name.len();
            match token {
                Token::Star => {
                    for j in 1..=name.len() {
                        matched[j] = matched[j] || matched[j - 1];
                    }
                }
                Token::Byte(set) => {
                    for j in (1..=name.len()).rev() {
                        matched[j] = matched[j - 1] && set.contains(name[j - 1]);
                    }
                    matched[0] = false;
                }
            }
        }
        (matched[name.len()], steps)
    }
}

/// The class whose body starts at `pattern[at]` (after its `[`), and where the pattern goes
/// on after its `]`; unterminated, it takes the rest of the pattern, as in Redis.
fn class(pattern: &[u8], mut at: usize) -> (ByteSet, usize) {
    let negated = pattern.get(at) == Some(&b'^');
    if negated {
        at += 1;
    }
    let mut set = ByteSet::NONE;
    loop {
        match pattern.get(at..).unwrap_or_default() {
            [] => break,
            [b'\\', escaped, ..] => {
                set.insert(*escaped);
                at += 2;
            }
            [b']', ..] => {
                at += 1;
                break;
            }
            [start, b'-', end, ..] => {
                let (low, high) = if start <= end {
                    (*start, *end)
                } else {
                    (*end, *start)
                };
                for byte in low..=high {
                    set.insert(byte);
                }
                at += 3;
            }
            [byte, ..] => {
                set.insert(*byte);
                at += 1;
            }
        }
    }
    (if negated { set.inverted() } else { set }, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str, name: &str) -> bool {
        Glob::new(pattern.as_bytes()).matches(name.as_bytes())
    }

    #[test]
    fn patterns_match_as_redis_globs_do() {
        for (pattern, name, matches) in [
            ("save", "save", true),
            ("*", "appendonly", true),
            ("*", "", true),
            ("append*", "appendfsync", true),
            ("app?ndonly", "appendonly", true),
            ("*only", "appendonly", true),
            ("save", "saved", false),
            ("?", "", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("**a", "ba", true),
            ("", "", true),
            ("", "a", false),
            ("maxclient[rs]", "maxclients", true),
            ("maxclient[^s]", "maxclients", false),
            ("[^a-r]ave", "save", true),
            ("[r-t]ave", "save", true),
            ("[t-r]ave", "save", true),
            ("[a-r]ave", "save", false),
            ("[]save", "save", false),
            ("[^]ave", "save", true),
            ("[\\]]", "]", true),
            ("[a\\-z]", "-", true),
            ("[a\\-z]", "b", false),
            ("sav[e", "save", true),
            ("sav[", "save", false),
            ("max\\clients", "maxclients", true),
            ("\\*", "*", true),
            ("\\*", "save", false),
            ("\\?", "a", false),
            ("save\\", "save\\", true),
            ("[*]", "*", true),
            ("[*]", "a", false),
        ] {
            assert_eq!(glob(pattern, name), matches, "{pattern:?} {name:?}");
        }
    }

    #[test]
    fn a_long_pattern_costs_a_name_no_more_than_a_short_one() {
        let name = b"proto-max-bulk-len";
        let bound = (2 * name.len() + 1) * name.len();
        for pattern in [
            "*".repeat(1 << 20),
            "*a".repeat(1 << 19),
            "?".repeat(1 << 20),
            format!("[{}]", "a".repeat(1 << 20)),
            format!("{}*", "[a-z]".repeat(1 << 18)),
            "*?".repeat(name.len()),
        ] {
            let (_, steps) = Glob::new(pattern.as_bytes()).run(name);
            assert!(steps <= bound, "{} bytes: {steps} steps", pattern.len());
        }
        assert!(Glob::new("*".repeat(1 << 20).as_bytes()).matches(name));
        assert!(!Glob::new("?".repeat(1 << 20).as_bytes()).matches(name));
    }
}
