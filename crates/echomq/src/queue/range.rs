//! Index ranges of a large read: which ones must go in pages of
//! [`READ_PAGE`], and what a Redis range (negative indexes from the end)
//! covers of a sequence of known length.

/// Most entries one call of a large read returns.
pub const READ_PAGE: u64 = 1000;

/// `start..=end` of a sequence of `len`, with negative indexes counted from
/// the end as Redis counts them; `None` when empty.
pub(crate) fn resolve(start: i64, end: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i64;
    let at = |i: i64| if i < 0 { len + i } else { i };
    let (s, e) = (at(start).max(0), at(end).min(len - 1));
    (s <= e && len > 0).then_some((s as u64, e as u64))
}

/// Whether a range must be read in pages.
pub(crate) fn is_large(start: i64, end: i64) -> bool {
    start < 0 || end < 0 || end.saturating_sub(start) >= READ_PAGE as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_as_redis_reads_them() {
        assert_eq!(resolve(0, -1, 5), Some((0, 4)));
        assert_eq!(resolve(-2, -1, 5), Some((3, 4)));
        assert_eq!(resolve(3, 100, 5), Some((3, 4)));
        assert_eq!(resolve(0, -1, 0), None);
        assert_eq!(resolve(6, 9, 5), None);
        assert_eq!(resolve(-10, 1, 5), Some((0, 1)));
        assert!(is_large(0, -1) && is_large(0, 1000) && !is_large(0, 999));
    }
}
