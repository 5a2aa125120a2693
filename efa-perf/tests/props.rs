//! Property tests (proptest, 256 cases each) of what efa-perf reads from a peer or from
//! the command line: control-protocol lines and set-ups, the peer's limits, hex payloads,
//! receive-ring arithmetic and sizes. No device needed.

use efa::{EndpointInfo, RemoteBuffer};
use efa_perf::cli::{format_size, parse_size, size_option, SizeError, MAX_SIZE};
use efa_perf::res::{ring_bytes, Setup};
use efa_perf::session::peer_limit;
use efa_perf::test::Test;
use efa_perf::wire::{self, decode_line, encode_line, WireError};
use proptest::prelude::*;
use serde_json::{json, Value};

fn any_setup() -> impl Strategy<Value = Setup> {
    (
        prop::sample::select(Test::ALL.to_vec()),
        1u32..=64,
        1u32..=65536,
        1usize..=MAX_SIZE,
        1u32..=64,
    )
        .prop_map(|(test, qps, depth, max_size, rails)| Setup {
            test,
            qps,
            depth,
            max_size,
            rails,
        })
}

/// Any JSON scalar a peer could put in a field.
fn any_field() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ]
}

/// A set-up line as [`encode_line`] writes it, without its newline.
fn line_of(s: &Setup) -> Vec<u8> {
    let mut l = encode_line(&s.to_json());
    assert_eq!(l.pop(), Some(b'\n'));
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn set_ups_round_trip_through_a_line(s in any_setup()) {
        let mut buf = encode_line(&s.to_json());
        let v = decode_line(&mut buf).unwrap().expect("a whole line");
        prop_assert!(buf.is_empty());
        prop_assert_eq!(Setup::from_json(&v), Ok(s));
    }

    #[test]
    fn any_bytes_are_a_message_or_a_typed_error(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = bytes.clone();
        let newline = bytes.iter().position(|&b| b == b'\n');
        match (decode_line(&mut buf), newline) {
            // Waiting for the rest of the line, which stays in the buffer.
            (Ok(None), None) => prop_assert_eq!(&buf, &bytes),
            (Ok(Some(v)), Some(end)) => {
                prop_assert_eq!(&buf[..], &bytes[end + 1..]);
                // Whatever it is, a set-up from it is in range or a typed error.
                if let Ok(s) = Setup::from_json(&v) {
                    prop_assert!((1..=64).contains(&s.qps) && (1..=MAX_SIZE).contains(&s.max_size));
                }
            }
            (Err(WireError::NotJson(start)), Some(end)) => {
                prop_assert!(start.chars().count() <= 40);
                prop_assert_eq!(&buf[..], &bytes[end + 1..]);
            }
            (r, n) => prop_assert!(false, "{r:?} with a newline at {n:?}"),
        }
    }

    #[test]
    fn any_set_up_fields_are_in_range_or_a_typed_error(
        test in prop_oneof![prop::sample::select(Test::ALL.to_vec()).prop_map(|t| json!(t.name())), any_field()],
        qps in any_field(),
        depth in any_field(),
        max_size in any_field(),
        rails in prop::option::of(any_field()),
    ) {
        let mut v = json!({ "setup": test, "qps": qps, "depth": depth, "max_size": max_size });
        // Without "rails" a set-up has one (a client of one device sends it anyway).
        if let Some(r) = &rails {
            v["rails"] = r.clone();
        }
        let in_range = |x: &Value, max: u64| x.as_u64().is_some_and(|n| (1..=max).contains(&n));
        match Setup::from_json(&v) {
            Ok(s) => {
                prop_assert_eq!(json!(s.qps), qps);
                prop_assert_eq!(json!(s.depth), depth);
                prop_assert_eq!(json!(s.max_size), max_size);
                prop_assert!((1..=64).contains(&s.qps) && (1..=65536).contains(&s.depth));
                prop_assert_eq!(json!(s.rails), rails.clone().unwrap_or(json!(1)));
            }
            Err(WireError::UnknownTest(_) | WireError::Field { .. }) => {}
            Err(WireError::OutOfRange { key, value, min, max }) => {
                prop_assert!(!(min..=max).contains(&value));
                prop_assert_eq!(&v[key.as_str()], &json!(value));
            }
            Err(e) => prop_assert!(false, "{e:?}"),
        }
        let all_ok = v["setup"].as_str().and_then(Test::from_name).is_some()
            && in_range(&v["qps"], 64)
            && in_range(&v["depth"], 65536)
            && in_range(&v["max_size"], MAX_SIZE as u64)
            && rails.as_ref().map_or(true, |r| in_range(r, 64));
        prop_assert_eq!(Setup::from_json(&v).is_ok(), all_ok);
    }

    #[test]
    fn truncated_set_up_lines_are_rejected_or_awaited(s in any_setup(), cut in any::<prop::sample::Index>()) {
        let line = line_of(&s);
        let k = cut.index(line.len());
        // Without its newline, a prefix is an incomplete line: kept, nothing decoded.
        let mut waiting = line[..k].to_vec();
        prop_assert_eq!(decode_line(&mut waiting), Ok(None));
        prop_assert_eq!(&waiting[..], &line[..k]);
        // Cut short by a newline, it is not a message.
        let mut cut_short = line[..k].to_vec();
        cut_short.push(b'\n');
        prop_assert!(matches!(decode_line(&mut cut_short), Err(WireError::NotJson(_))));
    }

    #[test]
    fn extended_set_up_lines_are_rejected(
        s in any_setup(),
        extra in "[^\n \t\r][^\n]{0,20}",
    ) {
        let mut buf = line_of(&s);
        buf.extend_from_slice(extra.as_bytes());
        buf.push(b'\n');
        prop_assert!(matches!(decode_line(&mut buf), Err(WireError::NotJson(_))));
    }

    #[test]
    fn peer_limits_are_never_truncated(n in prop_oneof![any::<u64>(), 0u64..=u64::from(u32::MAX)]) {
        match peer_limit(&json!({ "max_msg": n }), "max_msg") {
            Ok(m) => prop_assert_eq!(u64::from(m), n),
            Err(e) => {
                prop_assert!(n > u64::from(u32::MAX), "{e}");
                let range = WireError::OutOfRange { key: "max_msg".into(), value: n, min: 0, max: u32::MAX.into() };
                prop_assert_eq!(e, range);
            }
        }
    }

    #[test]
    fn ring_bytes_are_exact_or_none(qps in any::<u32>(), slots in any::<u32>(), slot in any::<usize>()) {
        let exact = u128::from(qps) * u128::from(slots) * slot as u128;
        prop_assert_eq!(ring_bytes(qps, slots, slot).map(|b| b as u128), (exact <= usize::MAX as u128).then_some(exact));
    }

    #[test]
    fn hex_round_trips_and_any_string_is_hex_or_none(bytes in prop::collection::vec(any::<u8>(), 0..64), s in "\\PC{0,40}") {
        prop_assert_eq!(wire::unhex(&wire::hex(&bytes)), Some(bytes));
        if let Some(b) = wire::unhex(&s) {
            prop_assert_eq!(wire::hex(&b), s.to_ascii_lowercase());
        }
    }

    #[test]
    fn endpoints_and_buffers_of_the_wrong_length_are_rejected(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assume!(bytes.len() != EndpointInfo::WIRE_SIZE);
        prop_assert!(EndpointInfo::parse(&bytes).is_err());
        prop_assume!(bytes.len() != RemoteBuffer::WIRE_SIZE);
        prop_assert!(RemoteBuffer::parse(&bytes).is_err());
    }

    #[test]
    fn any_size_string_parses_or_is_a_one_line_error(s in "\\PC{0,30}") {
        if let Ok(n) = parse_size(&s) {
            let digits = s.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
            prop_assert!(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()), "{s:?} -> {n}");
        }
        if let Err(e) = size_option("-s", &s) {
            prop_assert!(!e.contains('\n') && e.starts_with("-s "), "{e}");
        }
    }

    #[test]
    fn sizes_round_trip(n in any::<usize>(), k in 0usize..=(usize::MAX >> 30), upper in any::<bool>()) {
        prop_assert_eq!(parse_size(&format_size(n)), Ok(n));
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        let g = if upper { "G" } else { "g" };
        prop_assert_eq!(parse_size(&format!("{k}{g}")), Ok(k << 30));
        prop_assert_eq!(size_option("-s", &format_size(n)).is_ok(), (1..=MAX_SIZE).contains(&n));
    }

    #[test]
    fn sizes_beyond_usize_overflow(k in ((usize::MAX >> 30) + 1)..=usize::MAX, extra in "[0-9]{1,5}") {
        prop_assert_eq!(parse_size(&format!("{k}G")), Err(SizeError::Overflow));
        prop_assert_eq!(parse_size(&format!("{}{extra}", usize::MAX)), Err(SizeError::Overflow));
    }
}

#[test]
fn a_line_longer_than_the_limit_is_oversized() {
    let mut buf = vec![b' '; wire::MAX_LINE + 1];
    assert_eq!(decode_line(&mut buf), Err(WireError::Oversized));
    let mut buf = vec![b' '; wire::MAX_LINE];
    assert_eq!(decode_line(&mut buf), Ok(None));
}
