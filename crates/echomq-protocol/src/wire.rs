//! The bytes of one KEYS or ARGV entry, and the argument list of one call.
//!
//! A script call sends a few short values made for it alone (the job id, a
//! timestamp, the job key) beside long-lived ones (the queue's keys, constant
//! text). The Redis client keeps its own reference to every argument, and the
//! first reference taken to a freshly allocated buffer allocates its shared
//! header: two allocations per short value. Short values are therefore kept
//! inline, and [`call_parts`](crate::call::script::call_parts) copies them into one buffer per call that all of
//! them slice (docs/benchmarks.md, "Per-job cost, deterministic").

use bytes::Bytes;

/// Values up to this length are kept inline.
pub(crate) const INLINE: usize = 46;

/// One wire value: shared bytes, or a short value held inline.
#[derive(Clone)]
pub(crate) enum Wire {
    /// Reference-counted (or static) bytes.
    Shared(Bytes),
    /// A short value, `len` bytes of `buf`.
    Inline { len: u8, buf: [u8; INLINE] },
}

impl Wire {
    /// Copies `parts` (their concatenation) inline when short enough,
    /// into one exact-size buffer otherwise.
    pub(crate) fn concat(parts: &[&[u8]]) -> Wire {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len <= INLINE {
            let mut buf = [0u8; INLINE];
            let mut at = 0;
            for p in parts {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            return Wire::Inline {
                len: len as u8,
                buf,
            };
        }
        let mut v = Vec::with_capacity(len);
        for p in parts {
            v.extend_from_slice(p);
        }
        Wire::Shared(Bytes::from(v))
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Wire::Shared(b) => b,
            Wire::Inline { len, buf } => &buf[..*len as usize],
        }
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        match self {
            Wire::Shared(b) => b,
            Wire::Inline { .. } => Bytes::copy_from_slice(self.as_bytes()),
        }
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl PartialEq for Wire {
    fn eq(&self, other: &Wire) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Wire {}

impl std::hash::Hash for Wire {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_shared_compare_by_bytes() {
        let a = Wire::concat(&[b"emq:", b"q"]);
        let b = Wire::Shared(Bytes::from_static(b"emq:q"));
        assert!(matches!(a, Wire::Inline { .. }));
        assert_eq!(a, b);
        assert_eq!(a.clone().into_bytes(), b.into_bytes());
        let long = Wire::concat(&[&[b'y'; 40], &[b'z'; 40]]);
        assert!(matches!(long, Wire::Shared(_)));
        assert_eq!(long.as_bytes().len(), 80);
    }
}
