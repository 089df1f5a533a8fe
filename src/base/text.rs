//! Names and server words as messages show them: never longer than a
//! line.

/// How many bytes of a name messages show.
pub(crate) const SHOWN: usize = 100;

/// `bytes` for a message: as text (invalid UTF-8 replaced), cut after
/// `max` bytes (at a character boundary) with `... (N bytes)` telling the
/// whole length, so that a 1 MB resource name makes a short line.
pub(crate) fn shorten(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut cut = String::from_utf8_lossy(&bytes[..max]).into_owned();
    // A character split by the cut shows as one replacement character.
    if cut.ends_with('\u{FFFD}') && std::str::from_utf8(&bytes[..max]).is_err() {
        cut.pop();
    }
    format!("{cut}... ({} bytes)", bytes.len())
}

/// A token's first 8 bytes, for trace logs (enough to tell attempts
/// apart; the random part is hex, so the cut falls between characters).
pub(crate) fn token_prefix(token: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&token[..token.len().min(8)])
}

/// A number's decimal digits, written on the stack: what a command's
/// numbers (lengths, TTLs, counts) are sent as, without the allocation
/// of `to_string`.
#[derive(Clone, Copy)]
pub(crate) struct Decimal {
    digits: [u8; 20],
    start: u8,
}

impl Decimal {
    /// `n`'s digits (`u64::MAX` has 20), two at a time.
    pub(crate) fn of(mut n: u64) -> Decimal {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut digits = [0; 20];
        let mut start = digits.len();
        while n >= 100 {
            let pair = 2 * (n % 100) as usize;
            n /= 100;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = 2 * n as usize;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            digits[start] = b'0' + n as u8;
        }
        Decimal {
            digits,
            start: start as u8,
        }
    }

    /// The digits.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[usize::from(self.start)..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_read_as_to_string_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 4_294_967_296, u64::MAX - 1, u64::MAX] {
            assert_eq!(Decimal::of(n).as_bytes(), n.to_string().as_bytes());
        }
        let mut n = 1u64;
        while let Some(next) = n.checked_mul(7) {
            assert_eq!(Decimal::of(n).as_bytes(), n.to_string().as_bytes());
            assert_eq!(
                Decimal::of(n - 1).as_bytes(),
                (n - 1).to_string().as_bytes()
            );
            n = next;
        }
    }

    #[test]
    fn short_names_are_whole_and_long_ones_cut_with_their_length() {
        assert_eq!(shorten(b"lock:job", SHOWN), "lock:job");
        assert_eq!(shorten(&[b'a'; 100], SHOWN), "a".repeat(100));
        let long = vec![b'x'; 1 << 20];
        let shown = shorten(&long, SHOWN);
        assert_eq!(shown, format!("{}... (1048576 bytes)", "x".repeat(100)));
        // A cut inside a character leaves no half of it.
        let mut name = vec![b'a'; 99];
        name.extend_from_slice("é and more".as_bytes());
        let shown = shorten(&name, SHOWN);
        assert!(shown.starts_with(&"a".repeat(99)), "{shown}");
        assert!(
            shown.ends_with(&format!("... ({} bytes)", name.len())),
            "{shown}"
        );
        assert!(!shown.contains('\u{FFFD}'), "{shown}");
    }
}
