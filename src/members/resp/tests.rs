//! The reader against valid replies split every way, and against bytes
//! no server sends: never a panic, never a hang, never past the caps.

use super::*;
use proptest::prelude::*;

/// Reads one reply from `input` in one go.
fn one(input: &[u8]) -> Result<(usize, Option<Reply>), Cause> {
    Reader::default().read(input)
}

/// Feeds `input` in the pieces `cuts` makes, as a connection would
/// (unconsumed bytes carried over): the replies, or the first error.
fn fed(input: &[u8], cuts: &[usize]) -> Result<Vec<Reply>, Cause> {
    let mut reader = Reader::default();
    let (mut buffer, mut replies) = (Vec::new(), Vec::new());
    let mut last = 0;
    for &cut in cuts.iter().chain([input.len()].iter()) {
        let cut = cut.clamp(last, input.len());
        buffer.extend_from_slice(&input[last..cut]);
        last = cut;
        loop {
            let (used, reply) = reader.read(&buffer)?;
            buffer.drain(..used);
            match reply {
                Some(reply) => replies.push(reply),
                None => break,
            }
        }
    }
    Ok(replies)
}

fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.extend_from_slice(b"$-1\r\n"),
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
        Value::BulkString(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Value::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
        other => unreachable!("{other:?}"),
    }
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        Just(Value::Okay),
        any::<i64>().prop_map(Value::Int),
        // `+OK` is `Okay` however it was drawn: the expected value is what
        // the bytes mean (a drawn `SimpleString("OK")` once failed a run).
        "[a-zA-Z0-9 :{}-]{0,12}".prop_map(|s| match s.as_str() {
            "OK" => Value::Okay,
            _ => Value::SimpleString(s),
        }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BulkString),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
    })
}

#[test]
fn reads_the_replies_our_commands_get() {
    let ok = |input: &[u8]| match one(input).unwrap() {
        (used, Some(Ok(v))) => (used, v),
        other => panic!("{input:?}: {other:?}"),
    };
    assert_eq!(ok(b"+OK\r\n"), (5, Value::Okay));
    assert_eq!(ok(b":1\r\n:0\r\n"), (4, Value::Int(1)));
    assert_eq!(ok(b"$-1\r\n").1, Value::Nil);
    assert_eq!(
        ok(b"$3\r\nabc\r\n"),
        (9, Value::BulkString(b"abc".to_vec()))
    );
    assert_eq!(
        ok(b"*2\r\n:1\r\n$1\r\nx\r\n").1,
        Value::Array(vec![Value::Int(1), Value::BulkString(b"x".to_vec())])
    );
    assert_eq!(ok(b"*0\r\n").1, Value::Array(vec![]));
    // An error reply: the reply is the server's error; inside an array,
    // a nil.
    match one(b"-NOPERM no\r\n").unwrap() {
        (12, Some(Err(e))) => assert_eq!(e.code(), Some("NOPERM")),
        other => panic!("{other:?}"),
    }
    assert_eq!(ok(b"*1\r\n-ERR x\r\n").1, Value::Array(vec![Value::Nil]));
    for partial in [&b""[..], b"+O", b"+OK\r", b"$3\r\nab", b"*2\r\n:1\r\n"] {
        assert!(
            matches!(fed(partial, &[]), Ok(r) if r.is_empty()),
            "{partial:?}"
        );
    }
}

#[test]
fn bytes_no_server_sends_are_errors_that_say_what() {
    let said = |input: &[u8]| match one(input) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("{input:?}: {other:?}"),
    };
    assert!(said(b"?x\r\n").contains("unknown reply type"));
    assert!(said(b":abc\r\n").contains("malformed number"));
    assert!(said(b"$-5\r\n").contains("negative length"));
    // The empty line that made the old reader panic.
    assert!(said(b"\r\n").contains("empty line"));
    assert!(said(b"$3\r\nabcde\r\n").contains("without its line end"));
    assert!(said(b"$999999999\r\n").contains("larger than"));
    // An array announcing more than the cap could hold, at its header.
    assert!(said(b"*2147483647\r\n").contains("larger than"));
}

/// The hostile streams of the issue, each ended by a cap, in linear time.
#[test]
fn deep_nesting_huge_arrays_and_endless_lines_end_quickly() {
    let started = std::time::Instant::now();
    let deep = b"*1\r\n".repeat(2_000_000);
    let err = fed(&deep, &(1..200).map(|i| i * 40_000).collect::<Vec<_>>()).unwrap_err();
    assert!(err.to_string().contains("nested deeper than 32"), "{err}");
    // `*2147483647` then endless `:1` lines: refused on the header.
    let mut huge = b"*2147483647\r\n".to_vec();
    huge.extend(b":1\r\n".repeat(100_000));
    assert!(
        fed(&huge, &[])
            .unwrap_err()
            .to_string()
            .contains("larger than")
    );
    // A reply within the count cap but growing past the size cap.
    let mut big = b"*2000000\r\n".to_vec();
    big.extend(b"$10\r\n0123456789\r\n".repeat(600_000));
    let cuts: Vec<usize> = (1..2000).map(|i| i * 5_000).collect();
    assert!(
        fed(&big, &cuts)
            .unwrap_err()
            .to_string()
            .contains("larger than")
    );
    // A line that never ends, fed 512 bytes at a time.
    let endless = vec![b'+'; 200_000];
    let cuts: Vec<usize> = (1..400).map(|i| i * 512).collect();
    assert!(
        fed(&endless, &cuts)
            .unwrap_err()
            .to_string()
            .contains("line longer")
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// A line end split between two reads, and a long line fed a byte at a
/// time, are scanned once.
#[test]
fn a_line_end_split_across_reads_is_found() {
    let input = b"+hello\r\n:42\r\n";
    for cut in 0..input.len() {
        let replies = fed(input, &[cut]).unwrap();
        assert_eq!(replies.len(), 2, "cut at {cut}");
    }
    let line = [b"+".as_slice(), &[b'a'; 60_000], b"\r\n"].concat();
    let cuts: Vec<usize> = (1..line.len()).collect();
    let replies = fed(&line, &cuts).unwrap();
    assert_eq!(replies.len(), 1);
}

/// Numbers read as `i64::from_str` reads them: the edges, signs, and
/// what it refuses.
#[test]
fn numbers_read_as_the_standard_parser_reads_them() {
    for line in [
        "0",
        "-0",
        "+0",
        "7",
        "-1",
        "+42",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999",
        "999999999999999999",
        "-999999999999999999",
        "1000000000000000000",
        "1795774296342657",
        "000000000000000000000001",
        "12345678901234567x",
        "",
        "-",
        "+",
        "1a",
        " 1",
        "1 ",
        "--1",
        "+-1",
        "0x10",
        "١",
    ] {
        let ours = number(line.as_bytes()).ok();
        assert_eq!(ours, line.parse::<i64>().ok(), "{line:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes read as a number exactly when the standard parser reads
    /// them, to the same value.
    #[test]
    fn numbers_match_the_standard_parser(n in any::<i64>(), noise in proptest::collection::vec(any::<u8>(), 0..24)) {
        let line = n.to_string();
        prop_assert_eq!(number(line.as_bytes()).ok(), Some(n));
        // Short numbers too (any::<i64> draws mostly 19 digits).
        let short = (n % 1_000_000_000_000_000_000) >> (n as u64 % 60);
        prop_assert_eq!(number(short.to_string().as_bytes()).ok(), Some(short));
        let standard = std::str::from_utf8(&noise).ok().and_then(|s| s.parse::<i64>().ok());
        prop_assert_eq!(number(&noise).ok(), standard);
    }

    /// Any valid reply, split anywhere, reads back whole.
    #[test]
    fn valid_replies_split_anywhere_read_back(v in value(), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut bytes = Vec::new();
        encode(&v, &mut bytes);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let replies = fed(&bytes, &cuts).unwrap();
        prop_assert_eq!(replies.len(), 1);
        prop_assert_eq!(replies[0].as_ref().unwrap(), &v);
    }

    /// Every split point of a valid reply, one at a time.
    #[test]
    fn valid_replies_split_at_every_byte(v in value()) {
        let mut bytes = Vec::new();
        encode(&v, &mut bytes);
        for cut in 0..=bytes.len() {
            let replies = fed(&bytes, &[cut]).unwrap();
            prop_assert_eq!(replies.len(), 1);
            prop_assert_eq!(replies[0].as_ref().unwrap(), &v);
        }
    }

    /// Random bytes, and valid replies with bytes changed: an error, a
    /// reply, or a wait for more; never a panic, never more consumed than
    /// given.
    #[test]
    fn random_and_mutated_streams_never_panic(
        noise in proptest::collection::vec(any::<u8>(), 0..300),
        v in value(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let _ = fed(&noise, &cuts);
        let mut bytes = Vec::new();
        encode(&v, &mut bytes);
        for (at, b) in flips {
            let len = bytes.len();
            bytes[at % len] = b;
        }
        let _ = fed(&bytes, &cuts);
        let mut reader = Reader::default();
        if let Ok((used, _)) = reader.read(&bytes) {
            prop_assert!(used <= bytes.len());
        }
    }
}
