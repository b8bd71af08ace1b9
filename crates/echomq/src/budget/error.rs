//! Bad budgets, refused before anything is written.

use thiserror::Error;

/// The largest budget accepted: 2^48 bytes (256 TiB). The script counts
/// bytes in Lua numbers (doubles), exact far beyond it.
pub const MAX_BUDGET_BYTES: u64 = 1 << 48;

/// A budget refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// Zero bytes: a queue that may keep nothing is set with
    /// `removeOnComplete`/`removeOnFail`, and no budget is
    /// `clear_byte_budget`.
    #[error("a byte budget of 0 is refused (clear the budget, or use removeOnComplete)")]
    Zero,
    /// Above [`MAX_BUDGET_BYTES`].
    #[error("a byte budget of {0} bytes is too large (at most {MAX_BUDGET_BYTES})")]
    TooLarge(u128),
    /// Not a number of bytes (`65536`, `64MiB`, `2GB`…).
    #[error(
        "{0:?} is not a byte count (a whole number, optionally with KB, MB, GB, KiB, MiB or GiB)"
    )]
    NotANumber(String),
    /// A negative number.
    #[error("a byte budget cannot be negative ({0})")]
    Negative(String),
}

impl BudgetError {
    /// Checks a budget given in bytes.
    pub(crate) fn check(max: u64) -> Result<u64, BudgetError> {
        match max {
            0 => Err(BudgetError::Zero),
            n if n > MAX_BUDGET_BYTES => Err(BudgetError::TooLarge(n.into())),
            n => Ok(n),
        }
    }
}

/// Reads a byte count as the CLI takes it: a whole number, optionally
/// followed by a unit — `KB`, `MB`, `GB` (powers of 1000) or `KiB`, `MiB`,
/// `GiB` (powers of 1024), case-insensitive — and checks it as a budget.
pub fn parse_max_bytes(text: &str) -> Result<u64, BudgetError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(BudgetError::Negative(t.to_owned()));
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let (number, unit) = t.split_at(digits);
    let unit_size: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(BudgetError::NotANumber(t.to_owned())),
    };
    if number.is_empty() {
        return Err(BudgetError::NotANumber(t.to_owned()));
    }
    // Too many digits for u128 is too large, not malformed.
    let n: u128 = number
        .parse()
        .map_err(|_| BudgetError::TooLarge(u128::MAX))?;
    let bytes = n.saturating_mul(unit_size);
    match u64::try_from(bytes) {
        Ok(b) => BudgetError::check(b),
        Err(_) => Err(BudgetError::TooLarge(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_units_and_bad_ones_are_typed() {
        assert_eq!(parse_max_bytes("65536"), Ok(65536));
        assert_eq!(parse_max_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_max_bytes("2 gb"), Ok(2_000_000_000));
        assert_eq!(parse_max_bytes("0"), Err(BudgetError::Zero));
        assert_eq!(parse_max_bytes("0MiB"), Err(BudgetError::Zero));
        assert!(matches!(
            parse_max_bytes("-5"),
            Err(BudgetError::Negative(_))
        ));
        assert!(matches!(
            parse_max_bytes("lots"),
            Err(BudgetError::NotANumber(_))
        ));
        assert!(matches!(
            parse_max_bytes("12XB"),
            Err(BudgetError::NotANumber(_))
        ));
        assert!(matches!(
            parse_max_bytes(""),
            Err(BudgetError::NotANumber(_))
        ));
        assert!(matches!(
            parse_max_bytes("1.5MiB"),
            Err(BudgetError::NotANumber(_))
        ));
        assert!(matches!(
            parse_max_bytes("300000000000000000000000000000000000000000"),
            Err(BudgetError::TooLarge(_))
        ));
        assert!(matches!(
            parse_max_bytes("1000000GiB"),
            Err(BudgetError::TooLarge(_))
        ));
    }
}
