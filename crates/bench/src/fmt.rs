//! Number formatting for reports and the live display.

/// `1234567` → `"1,234,567"`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A rate in three significant figures with an SI suffix and no unit, so the
/// caller appends its own (`format!("{} txn/s", human_rate(r))`):
/// `0.5` → `"0.50"`, `950.0` → `"950"`, `12_345.0` → `"12.3k"`,
/// `1_234_567.0` → `"1.23M"`, `2.5e9` → `"2.50G"`. Not finite or negative → `"-"`.
pub fn human_rate(per_s: f64) -> String {
    if !per_s.is_finite() || per_s < 0.0 {
        return "-".to_string();
    }
    let (value, suffix) = if per_s >= 1e9 {
        (per_s / 1e9, "G")
    } else if per_s >= 1e6 {
        (per_s / 1e6, "M")
    } else if per_s >= 1e3 {
        (per_s / 1e3, "k")
    } else {
        (per_s, "")
    };
    // Three significant figures; a value that rounds up to 1000 in its unit is
    // printed as "1000k" rather than re-scaled: rare and still unambiguous.
    if value >= 100.0 {
        format!("{value:.0}{suffix}")
    } else if value >= 10.0 {
        format!("{value:.1}{suffix}")
    } else {
        format!("{value:.2}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(100_000), "100,000");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn human_rate_uses_si_suffixes() {
        assert_eq!(human_rate(0.0), "0.00");
        assert_eq!(human_rate(0.5), "0.50");
        assert_eq!(human_rate(950.0), "950");
        assert_eq!(human_rate(12_345.0), "12.3k");
        assert_eq!(human_rate(1_234_567.0), "1.23M");
        assert_eq!(human_rate(2.5e9), "2.50G");
        assert_eq!(human_rate(f64::NAN), "-");
        assert_eq!(human_rate(-1.0), "-");
    }
}
