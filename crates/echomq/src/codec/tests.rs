//! The codec core: round trips, key rotation and every bad input, typed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn key(byte: u8) -> CodecKey {
    CodecKey::new([byte; 32])
}

fn sealed_opts() -> CodecOptions {
    CodecOptions::default()
        .encode(Some(Codec::Aes256GcmGzip))
        .keys(Keyring::default().with_key("k1", key(1)).unwrap())
}

/// An order over [`GZIP_MIN_BYTES`] of JSON, so `gzip` wraps it.
fn sample() -> Value {
    let lines: Vec<Value> = (1..=8)
        .map(|n| json!({"sku": format!("A-{n}"), "qty": n, "price": 9.99}))
        .collect();
    json!({"order": 42, "lines": lines, "note": "ünïcode ✓"})
}

#[test]
fn gzip_stores_short_values_plain_and_sealing_never_does() {
    assert!(sample().to_string().len() >= GZIP_MIN_BYTES);
    let gzip = CodecOptions::default().encode(Some(Codec::Gzip));
    let short = json!({"seenBy": "rust", "len": 7});
    assert_eq!(gzip.encode_value(short.clone()).unwrap(), short);
    assert_eq!(
        gzip.encode_text(short.to_string()).unwrap(),
        short.to_string()
    );
    // Just under the bound plain, at it wrapped.
    let at = |n: usize| Value::from("x".repeat(n - 2));
    assert_eq!(
        gzip.encode_value(at(GZIP_MIN_BYTES - 1)).unwrap(),
        at(GZIP_MIN_BYTES - 1)
    );
    assert!(is_envelope(&gzip.encode_value(at(GZIP_MIN_BYTES)).unwrap()));
    // Plain data naming the codec field is wrapped, or it would be read as an envelope.
    let lookalike = json!({"emq:codec": "gzip"});
    let stored = gzip.encode_value(lookalike.clone()).unwrap();
    assert!(is_envelope(&stored) && stored != lookalike);
    assert_eq!(gzip.decode(&stored).unwrap().unwrap(), lookalike);
    assert!(is_envelope(&sealed_opts().encode_value(short).unwrap()));
}

#[test]
fn plain_data_is_not_an_envelope() {
    let o = CodecOptions::default();
    assert!(o.decode(&sample()).is_none());
    assert!(o.decode(&json!("text")).is_none());
    assert_eq!(o.encode_text("{\"a\":1}".into()).unwrap(), "{\"a\":1}");
}

#[test]
fn gzip_round_trip_is_byte_identical() {
    let o = CodecOptions::default().encode(Some(Codec::Gzip));
    let text = sample().to_string();
    let stored = o.encode_text(text.clone()).unwrap();
    let env: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(env["emq:codec"], "gzip");
    assert_eq!(env["v"], 1);
    // A worker without any codec setting still reads gzip.
    let back = CodecOptions::default().decode(&env).unwrap().unwrap();
    assert_eq!(back.to_string(), text);
}

#[test]
fn sealed_round_trip_and_rotation() {
    let o = sealed_opts();
    let old = o.encode_value(sample()).unwrap();
    assert_eq!(old["kid"], "k1");
    let rotated = o
        .clone()
        .keys(o.keys.clone().with_key("k2", key(2)).unwrap());
    let new = rotated.encode_value(sample()).unwrap();
    assert_eq!(new["kid"], "k2");
    assert_eq!(rotated.decode(&old).unwrap().unwrap(), sample());
    assert_eq!(rotated.decode(&new).unwrap().unwrap(), sample());
    // Two seals of one value differ (random IV).
    assert_ne!(rotated.encode_value(sample()).unwrap(), new);
}

#[test]
fn bad_inputs_are_typed() {
    let o = sealed_opts();
    let sealed = o.encode_value(sample()).unwrap();
    let err = |v: &Value, o: &CodecOptions| o.decode(v).unwrap().unwrap_err();

    let mut unknown = sealed.clone();
    unknown["emq:codec"] = "zstd".into();
    assert_eq!(err(&unknown, &o), CodecError::UnknownCodec("zstd".into()));

    let missing = CodecOptions::default();
    assert_eq!(err(&sealed, &missing), CodecError::UnknownKey("k1".into()));

    let wrong = CodecOptions::default().keys(Keyring::default().with_key("k1", key(9)).unwrap());
    assert_eq!(
        err(&sealed, &wrong),
        CodecError::AuthenticationFailed("k1".into())
    );

    let mut tampered = sealed.clone();
    let mut body = STANDARD.decode(tampered["b64"].as_str().unwrap()).unwrap();
    body[0] ^= 1;
    tampered["b64"] = STANDARD.encode(body).into();
    assert_eq!(
        err(&tampered, &o),
        CodecError::AuthenticationFailed("k1".into())
    );

    // Moving a sealed payload under another key id breaks the associated data.
    let both = o
        .clone()
        .keys(o.keys.clone().with_key("k2", key(1)).unwrap());
    let mut relabelled = sealed.clone();
    relabelled["kid"] = "k2".into();
    assert_eq!(
        err(&relabelled, &both),
        CodecError::AuthenticationFailed("k2".into())
    );

    let mut bad64 = sealed.clone();
    bad64["b64"] = "!!!not base64".into();
    assert_eq!(err(&bad64, &o), CodecError::Base64("b64"));

    let corrupt_gzip =
        json!({"emq:codec": "gzip", "v": 1, "b64": STANDARD.encode(b"not gzip at all")});
    assert!(matches!(err(&corrupt_gzip, &o), CodecError::Decompress(_)));

    let not_json = o.seal(Codec::Gzip, b"{not json").unwrap();
    assert!(matches!(err(&not_json, &o), CodecError::Json(_)));

    let v2 = json!({"emq:codec": "gzip", "v": 2, "b64": ""});
    assert_eq!(err(&v2, &o), CodecError::UnsupportedVersion(2));
    let no_body = json!({"emq:codec": "gzip", "v": 1});
    assert!(matches!(
        err(&no_body, &o),
        CodecError::MalformedEnvelope(_)
    ));
    let no_kid = json!({"emq:codec": "aes256gcm+gzip", "v": 1, "iv": "", "b64": ""});
    assert!(matches!(err(&no_kid, &o), CodecError::MalformedEnvelope(_)));

    let no_key = CodecOptions::default().encode(Some(Codec::Aes256GcmGzip));
    assert_eq!(
        no_key.encode_value(sample()).unwrap_err(),
        CodecError::NoCurrentKey("aes256gcm+gzip")
    );
}

#[test]
fn a_decompression_bomb_stops_at_the_cap() {
    // 4 MiB of spaces around a number compress to a few KiB.
    let big = format!("{}1", " ".repeat(4 << 20));
    let o = CodecOptions::default().max_decoded_bytes(1 << 20);
    let env = o.seal(Codec::Gzip, big.as_bytes()).unwrap();
    assert!(env["b64"].as_str().unwrap().len() < 64 << 10);
    assert_eq!(
        o.decode(&env).unwrap().unwrap_err(),
        CodecError::TooLarge { limit: 1 << 20 }
    );
    let roomy = o.clone().max_decoded_bytes(8 << 20);
    assert_eq!(roomy.decode(&env).unwrap().unwrap(), json!(1));
}

#[test]
fn keys_parse_and_never_show() {
    let k1 = STANDARD.encode([1u8; 32]);
    let k2 = STANDARD.encode([2u8; 32]);
    let ring = Keyring::parse(&format!("k1:{k1}, k2:{k2}")).unwrap();
    assert_eq!(ring.current_id(), Some("k2"));
    assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
    let file = Keyring::parse(&format!("# keys\nk1:{k1}\n\nk2:{k2}\n")).unwrap();
    assert_eq!(file, ring);
    let shown = format!("{ring:?} {:?} {:?}", key(1), sealed_opts());
    assert!(
        !shown.contains(&k1) && !shown.contains("1, 1, 1"),
        "{shown}"
    );
    assert!(shown.contains("redacted") || shown.contains("Keyring"));

    for bad in ["k1", "k1:short", ":AAAA", &format!("a b:{k1}")] {
        let e = Keyring::parse(bad).unwrap_err();
        assert!(matches!(e, CodecError::InvalidKey(_)), "{bad}: {e:?}");
        assert!(!e.to_string().contains(&k1));
    }
    assert_eq!(
        ring.clone().with_current("k9").unwrap_err(),
        CodecError::UnknownKey("k9".into())
    );
    assert_eq!(ring.with_current("k1").unwrap().current_id(), Some("k1"));
}

/// The JSON text a `gzip` envelope holds, inflated.
fn inflated(env: &Value) -> String {
    use std::io::Read as _;
    let body = STANDARD.decode(env["b64"].as_str().unwrap()).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[test]
fn what_is_compressed_is_ascii_and_the_same_document() {
    // Two-byte, three-byte and four-byte (a surrogate pair) characters.
    let v = json!({"name": "Café Örnsköld ✓ 😀", "lines": (0..100).collect::<Vec<_>>()});
    let o = CodecOptions::default().encode(Some(Codec::Gzip));
    let env = o.encode_value(v.clone()).unwrap();
    let text = inflated(&env);
    assert!(text.is_ascii(), "{text}");
    assert!(
        text.contains(r"Caf\u00e9 \u00d6rnsk\u00f6ld \u2713 \ud83d\ude00"),
        "{text}"
    );
    assert_eq!(o.decode(&env).unwrap().unwrap(), v);
    // The escaped text reads back as the same document, and so as the same text.
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap().to_string(),
        v.to_string()
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~é✓😀]{0,24}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec(("[a-z:]{1,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_codec_round_trips(v in json_value()) {
        let text = v.to_string();
        for codec in [Codec::Gzip, Codec::Aes256GcmGzip] {
            let o = sealed_opts().encode(Some(codec));
            let stored: Value = serde_json::from_str(&o.encode_text(text.clone()).unwrap()).unwrap();
            let plain = codec == Codec::Gzip && text.len() < GZIP_MIN_BYTES && !text.contains(CODEC_FIELD);
            if plain {
                prop_assert_eq!(stored.to_string(), text.clone());
                continue;
            }
            prop_assert!(is_envelope(&stored));
            if codec == Codec::Gzip {
                prop_assert!(inflated(&stored).is_ascii());
            }
            prop_assert_eq!(o.decode(&stored).unwrap().unwrap().to_string(), text.clone());
        }
    }

    #[test]
    fn garbage_envelopes_never_panic(b64 in "[A-Za-z0-9+/=!]{0,64}", iv in "[A-Za-z0-9+/=]{0,24}", name in "gzip|aes256gcm\\+gzip|x") {
        let env = json!({"emq:codec": name, "v": 1, "kid": "k1", "iv": iv, "b64": b64});
        prop_assert!(sealed_opts().decode(&env).unwrap().is_err());
    }
}
