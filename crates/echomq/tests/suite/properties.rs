//! Properties of the runtime's decoders of foreign text (docs/decisions.md
//! §Foreign data): the cron walk of scheduler iterations and the
//! connection URL. The byte-level targets are the fuzz targets' (`fuzz/`).

use crate::targets;

use echomq::connection::{host_port, parse_version, redacted_url};
use echomq::scheduler::CronSchedule;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Each fuzz target returns on any bytes (and its invariants hold).
    #[test]
    fn fuzz_targets_return_on_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..96)) {
        for (_, target) in targets::TARGETS {
            target(&data);
        }
    }

    /// A password in a URL is never shown, wherever the URL puts it.
    #[test]
    fn urls_never_show_a_password(
        scheme in prop::sample::select(vec!["redis", "rediss", "redis-cluster", "rediss-sentinel", "valkey"]),
        user in "[a-z]{0,6}",
        secret in "[A-Za-z0-9]{12,16}",
        host in "[a-z][a-z0-9.-]{0,10}|\\[::1\\]",
        port in proptest::option::of(1u16..),
        db in proptest::option::of(0u8..16),
        in_query in any::<bool>(),
    ) {
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let db = db.map(|d| format!("/{d}")).unwrap_or_default();
        let url = if in_query {
            format!("{scheme}://{host}{port}{db}?node=h:1&sentinelPassword={secret}")
        } else {
            format!("{scheme}://{user}:{secret}@{host}{port}{db}")
        };
        let shown = redacted_url(&url);
        prop_assert!(!shown.contains(&secret), "{}", shown);
        let debug = format!("{:?}", echomq::ConnectionConfig::with_url(url.as_str()));
        prop_assert!(!debug.contains(&secret), "{}", debug);
        let expected = if port.is_empty() { format!("{host}:6379") } else { format!("{host}{port}") };
        prop_assert_eq!(host_port(&url), expected);
    }

    /// Server versions read back.
    #[test]
    fn versions_read_back(v in (any::<u32>(), any::<u32>(), any::<u32>())) {
        prop_assert_eq!(parse_version(&format!("{}.{}.{}", v.0, v.1, v.2)), Some(v));
        prop_assert_eq!(parse_version(&format!(" {} ", v.0)), Some((v.0, 0, 0)));
    }

    /// A daily pattern's next occurrence is the next time of day it names.
    #[test]
    fn daily_cron_is_the_next_time_of_day(
        minute in 0i64..60,
        hour in 0i64..24,
        after in 0i64..4_102_444_800_000,
    ) {
        let schedule = CronSchedule::new(&format!("{minute} {hour} * * *"), Some("UTC")).unwrap();
        let next = schedule.next_after(after, None, None).unwrap();
        prop_assert!(next > after && next - after <= 86_400_000, "{} after {}", next, after);
        prop_assert_eq!(next.rem_euclid(86_400_000), (hour * 60 + minute) * 60_000);
    }
}
