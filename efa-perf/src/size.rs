//! Sizes on the command line: digits with an optional K, M or G suffix (KiB, MiB, GiB),
//! from 1 byte to [`MAX_SIZE`] inclusive; anything else is a typed error, never a panic;
//! and the sizes a run takes ([`Sizes`]).

use crate::cli::MAX_SIZE;

/// Which sizes to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// `-s`: exactly this one.
    One(usize),
    /// Powers of two in `[min, max]`.
    Sweep {
        /// Smallest.
        min: usize,
        /// Largest.
        max: usize,
    },
}

impl Sizes {
    /// The sizes, in order.
    pub fn list(&self) -> Vec<usize> {
        match *self {
            Sizes::One(s) => vec![s],
            Sizes::Sweep { min, max } => {
                let mut v = Vec::new();
                let mut s = min.next_power_of_two();
                while s <= max {
                    v.push(s);
                    s *= 2;
                }
                v
            }
        }
    }
}

/// Why [`parse_size`] rejected a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not digits with an optional K, M or G suffix.
    Malformed,
    /// A number too large for any size (beyond `usize`, suffix included).
    Overflow,
}

/// A number of bytes: decimal digits with an optional K (KiB), M (MiB) or G (GiB) suffix,
/// either case. No range check beyond overflow (see [`MAX_SIZE`]).
pub fn parse_size(s: &str) -> Result<usize, SizeError> {
    let (digits, mult): (&str, usize) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SizeError::Malformed);
    }
    // Only digits are left, so the one way to fail is a number beyond usize.
    let n = digits.parse::<usize>().map_err(|_| SizeError::Overflow)?;
    n.checked_mul(mult).ok_or(SizeError::Overflow)
}

/// `n` bytes as [`parse_size`] reads it back: with the largest suffix that divides it.
pub fn format_size(n: usize) -> String {
    for (shift, suffix) in [(30, 'G'), (20, 'M'), (10, 'K')] {
        if n != 0 && n % (1 << shift) == 0 {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// The value of the size option `name`, checked against `1..=MAX_SIZE`.
pub fn size_option(name: &str, v: &str) -> Result<usize, String> {
    let range = format!(
        "from 1 to {} ({MAX_SIZE}) bytes, both included",
        format_size(MAX_SIZE)
    );
    match parse_size(v) {
        Ok(n) if (1..=MAX_SIZE).contains(&n) => Ok(n),
        Ok(_) | Err(SizeError::Overflow) => {
            Err(format!("{name} {v} is out of range: sizes go {range}"))
        }
        Err(SizeError::Malformed) => Err(format!(
            "{name} needs a size in bytes {range}, digits with an optional K, M or G suffix (KiB, MiB, GiB), got {v:?}"
        )),
    }
}
