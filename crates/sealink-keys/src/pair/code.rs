//! The pairing code: `N-word-word`, as magic-wormhole writes its codes.
//!
//! N is 1 to 99 and each word one of 256: log2(99 * 256 * 256) ≈ 22.6 bits. SPAKE2 gives an
//! active attacker one guess per run and the listener runs once, so a guess succeeds with
//! odds of about 1 in 6.5 million; the code is short enough to read out over the phone.

use std::fmt;

use super::PairError;
use super::words::WORDS;

/// Largest number a code starts with.
const MAX_NUMBER: u8 = 99;

/// A parsed or freshly drawn pairing code.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Code {
    number: u8,
    words: [u8; 2],
}

// Not derived: the code is the password, and a derived Debug would print it into logs.
impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Code(..)")
    }
}

impl Code {
    /// A new code from the system's random generator (uniform: rejection sampling for N).
    pub fn generate() -> Result<Code, PairError> {
        let mut b = [0u8; 3];
        loop {
            sealink_crypto::sign::random_bytes(&mut b).map_err(|_| PairError::Random)?;
            // 0..=197 maps evenly onto 1..=99; anything above is drawn again.
            if b[0] < 2 * MAX_NUMBER {
                return Ok(Code {
                    number: b[0] % MAX_NUMBER + 1,
                    words: [b[1], b[2]],
                });
            }
        }
    }

    /// Parses `N-word-word` (case and surrounding blanks ignored). The error names what is
    /// wrong without repeating the whole code.
    pub fn parse(s: &str) -> Result<Code, PairError> {
        let bad = |why: String| PairError::BadCode(why);
        let lower = s.trim().to_ascii_lowercase();
        let mut parts = lower.split('-');
        let (Some(n), Some(w1), Some(w2), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(
                "expected NUMBER-WORD-WORD, such as 7-guitar-ocean".into()
            ));
        };
        let number = match n.parse::<u8>() {
            Ok(v) if (1..=MAX_NUMBER).contains(&v) && !n.starts_with('0') => v,
            _ => return Err(bad(format!("{n:?} is not a number from 1 to {MAX_NUMBER}"))),
        };
        let word = |w: &str| {
            WORDS
                .binary_search(&w)
                .ok()
                .and_then(|i| u8::try_from(i).ok())
                .ok_or_else(|| bad(format!("{w:?} is not a word of pairing codes (a typo?)")))
        };
        Ok(Code {
            number,
            words: [word(w1)?, word(w2)?],
        })
    }

    /// The canonical text, which is also SPAKE2's password.
    pub fn text(&self) -> String {
        format!(
            "{}-{}-{}",
            self.number,
            WORDS[usize::from(self.words[0])],
            WORDS[usize::from(self.words[1])]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_list_is_sorted_and_distinct() {
        assert!(WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(
            WORDS
                .iter()
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
        );
    }

    #[test]
    fn codes_round_trip_and_bad_ones_are_refused() {
        for _ in 0..200 {
            let c = Code::generate().unwrap();
            assert_eq!(Code::parse(&c.text()).unwrap(), c);
            assert!((1..=MAX_NUMBER).contains(&c.number));
        }
        assert_eq!(
            Code::parse(" 7-Guitar-OCEAN\n").unwrap().text(),
            "7-guitar-ocean"
        );
        for bad in [
            "",
            "7",
            "7-guitar",
            "7-guitar-ocean-x",
            "0-guitar-ocean",
            "07-guitar-ocean",
            "100-guitar-ocean",
            "x-guitar-ocean",
            "7-guitar-oceans",
            "7--ocean",
            "-7-guitar-ocean",
        ] {
            assert!(
                matches!(Code::parse(bad), Err(PairError::BadCode(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            format!("{:?}", Code::parse("7-guitar-ocean").unwrap()),
            "Code(..)"
        );
    }
}
