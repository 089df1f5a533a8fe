//! The reply reader: RESP2, the few reply types our commands get, read
//! so that no peer can break it.
//!
//! - **No recursion.** Arrays are a stack of frames on the heap, at most
//!   [`MAX_DEPTH`] deep: a peer that sends a million nested `*1` lines
//!   gets an error, not a stack overflow.
//! - **Resumable.** What has been parsed of a reply stays parsed: each
//!   byte is looked at once however the reply is split across reads (a
//!   line without its end is scanned from where the last scan stopped).
//! - **Capped.** One reply is at most [`MAX_REPLY`] bytes (an array
//!   announcing more elements than that could hold is refused on its
//!   header), one line at most [`MAX_LINE`].
//!
//! The largest replies our commands get are far below the caps: a
//! set's acquisition answers one number per member, a semaphore's survey
//! one per member, `CLUSTER SLOTS` a few hundred bytes per shard, and a
//! kept script reply (an election's record, `inspect`) a resource name
//! and a value.

use redis::Value;

use crate::base::node_error::Cause;

/// The largest reply accepted, in bytes: 8 MiB.
pub(crate) const MAX_REPLY: usize = 8 << 20;

/// The deepest nesting of arrays accepted.
pub(crate) const MAX_DEPTH: usize = 32;

/// The longest line accepted (a type, a number, a simple string or an
/// error's text), in bytes.
pub(crate) const MAX_LINE: usize = 64 << 10;

/// The smallest an array element can be (`+\r\n`): an array announcing
/// more elements than the rest of the cap holds this way is refused.
const MIN_ELEMENT: usize = 3;

/// A reply being read: the arrays open around the current element.
#[derive(Default)]
pub(crate) struct Reader {
    /// Open arrays, outermost first: elements still to come, and those
    /// read.
    stack: Vec<(usize, Vec<Value>)>,
    /// Bytes of the reply consumed so far.
    used: usize,
    /// How far the current line was scanned without finding its end.
    scanned: usize,
}

/// One reply read: a value, or the error reply the server sent.
pub(crate) type Reply = Result<Value, Cause>;

impl Reader {
    /// Reads from `input` (bytes received and not consumed yet): how many
    /// bytes it consumed, and the reply if one is complete. Bytes of an
    /// incomplete reply are consumed as far as whole lines and bulk
    /// strings go; the rest waits for more. An `Err` is a reply no Redis
    /// server sends: the connection is unusable.
    pub(crate) fn read(&mut self, input: &[u8]) -> Result<(usize, Option<Reply>), Cause> {
        let mut at = 0;
        loop {
            let rest = &input[at..];
            let from = self.scanned.min(rest.len());
            let Some(end) = find_crlf(&rest[from..]).map(|i| from + i) else {
                if rest.len() > MAX_LINE {
                    return Err(bad("a line longer than 65536 bytes", rest));
                }
                // The last byte may be the `\r` of a `\r\n` to come.
                self.scanned = rest.len().saturating_sub(1);
                return Ok((at, None));
            };
            if end > MAX_LINE {
                return Err(bad("a line longer than 65536 bytes", rest));
            }
            let Some((&kind, line)) = rest[..end].split_first() else {
                return Err(bad("an empty line", rest));
            };
            let after = end + 2;
            let value = match kind {
                b'+' if line == b"OK" => Ok(Value::Okay),
                b'+' => Ok(Value::SimpleString(text(line))),
                b'-' => {
                    let text = text(line);
                    let (code, detail) = text.split_once(' ').unwrap_or((&text, ""));
                    Err(Cause::Reply {
                        code: code.to_owned(),
                        detail: detail.to_owned(),
                    })
                }
                b':' => Ok(Value::Int(number(line)?)),
                b'$' => match number(line)? {
                    -1 => Ok(Value::Nil),
                    len if len >= 0 => {
                        let len = len as usize;
                        if len > MAX_REPLY.saturating_sub(self.used + after) {
                            return Err(bad("a reply larger than 8388608 bytes", rest));
                        }
                        if rest.len() < after + len + 2 {
                            // The header is read again with the body:
                            // a short line, scanned once more.
                            self.scanned = 0;
                            return Ok((at, None));
                        }
                        if &rest[after + len..after + len + 2] != b"\r\n" {
                            return Err(bad("a bulk string without its line end", rest));
                        }
                        self.consume(after + len + 2);
                        at += after + len + 2;
                        if let Some(reply) =
                            self.complete(Ok(Value::BulkString(rest[after..after + len].to_vec())))
                        {
                            return Ok((at, Some(reply)));
                        }
                        continue;
                    }
                    _ => return Err(bad("a negative length", rest)),
                },
                b'*' => match number(line)? {
                    -1 => Ok(Value::Nil),
                    0 => Ok(Value::Array(Vec::new())),
                    count if count > 0 => {
                        let count = count as usize;
                        let room = MAX_REPLY.saturating_sub(self.used + after) / MIN_ELEMENT;
                        if count > room {
                            return Err(bad("a reply larger than 8388608 bytes", rest));
                        }
                        if self.stack.len() >= MAX_DEPTH {
                            return Err(bad("a reply nested deeper than 32 arrays", rest));
                        }
                        self.consume(after);
                        at += after;
                        self.stack.push((count, Vec::with_capacity(count.min(64))));
                        continue;
                    }
                    _ => return Err(bad("a negative length", rest)),
                },
                other => {
                    return Err(bad(
                        "an unknown reply type",
                        format!("{:?}", other as char).as_bytes(),
                    ));
                }
            };
            self.consume(after);
            at += after;
            if let Some(reply) = self.complete(value) {
                return Ok((at, Some(reply)));
            }
        }
    }

    /// Counts `n` bytes into the reply, and starts the next line.
    fn consume(&mut self, n: usize) {
        self.used += n;
        self.scanned = 0;
    }

    /// Puts a value read into its array, closing every array it fills;
    /// the whole reply when the outermost one closes (or there is none).
    /// An error reply inside an array reads as nil (our scripts' replies
    /// never hold one).
    fn complete(&mut self, mut value: Reply) -> Option<Reply> {
        loop {
            let Some((left, items)) = self.stack.last_mut() else {
                self.used = 0;
                return Some(value);
            };
            items.push(value.unwrap_or(Value::Nil));
            *left -= 1;
            if *left > 0 {
                return None;
            }
            let (_, items) = self.stack.pop().unwrap_or_default();
            value = Ok(Value::Array(items));
        }
    }
}

/// Where the first `\r\n` in `bytes` starts.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = bytes[from..].iter().position(|&b| b == b'\r') {
        let i = from + i;
        match bytes.get(i + 1) {
            Some(b'\n') => return Some(i),
            Some(_) => from = i + 1,
            None => return None,
        }
    }
    None
}

fn text(line: &[u8]) -> String {
    String::from_utf8_lossy(line).into_owned()
}

fn number(line: &[u8]) -> Result<i64, Cause> {
    // What `i64::from_str` takes (a sign, then digits), without the
    // UTF-8 check: every reply header goes through here.
    let malformed = || bad("a malformed number", line);
    let (negative, digits) = match line {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, line),
    };
    if digits.is_empty() {
        return Err(malformed());
    }
    // Up to 18 digits cannot overflow: no check per digit (a fencing
    // counter's 16 digits come on every fenced acquisition).
    if digits.len() <= 18 {
        let mut n: i64 = 0;
        for &byte in digits {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return Err(malformed());
            }
            n = n * 10 + i64::from(digit);
        }
        return Ok(if negative { -n } else { n });
    }
    let mut n: i64 = 0;
    for &byte in digits {
        let digit = i64::from(byte.wrapping_sub(b'0'));
        if digit > 9 {
            return Err(malformed());
        }
        // Negative numbers are counted down, so that i64::MIN reads.
        n = n
            .checked_mul(10)
            .and_then(|n| match negative {
                true => n.checked_sub(digit),
                false => n.checked_add(digit),
            })
            .ok_or_else(malformed)?;
    }
    Ok(n)
}

/// A reply no Redis server sends: what was wrong, and the start of what
/// came (at most 40 bytes, as text).
fn bad(what: &'static str, came: &[u8]) -> Cause {
    let shown: String = String::from_utf8_lossy(&came[..came.len().min(40)])
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect();
    Cause::Malformed(format!("{what} (it sent {shown:?})"))
}

#[cfg(test)]
mod tests;
