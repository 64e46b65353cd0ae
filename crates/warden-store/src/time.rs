//! Timestamps for the audit trail: RFC 3339 in UTC, and `--since` values.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-30T04:19:31.123Z`.
pub fn format_rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `--since`: a duration back from now (`90s`, `15m`, `2h`, `7d`) or an RFC 3339
/// UTC time (`2026-11-30T04:00:00Z`). Milliseconds since the epoch.
pub fn parse_since(text: &str, now: SystemTime) -> Result<i64, String> {
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let t = text.trim();
    if t.ends_with(['Z', 'z']) {
        return parse_timestamp(t).ok_or_else(|| bad_since(text));
    }
    let unit = t.chars().last().ok_or_else(|| bad_since(text))?;
    let n: u64 = t[..t.len() - unit.len_utf8()]
        .parse()
        .map_err(|_| bad_since(text))?;
    let secs = match unit {
        's' => n,
        'm' => n * 60,
        'h' => n * 3600,
        'd' => n * 86_400,
        _ => return Err(bad_since(text)),
    };
    Ok(now_ms - Duration::from_secs(secs).as_millis() as i64)
}

fn parse_timestamp(t: &str) -> Option<i64> {
    let (date, time) = t.trim_end_matches(['Z', 'z']).split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-');
    let (y, mo, da) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.splitn(3, ':');
    let (hh, mm, ss): (i64, i64, i64) = (
        h.next()?.parse().ok()?,
        h.next()?.parse().ok()?,
        h.next().unwrap_or("0").parse().ok()?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    Some((days_from_civil(y, mo, da) * 86_400 + hh * 3600 + mm * 60 + ss) * 1000 + ms)
}

fn bad_since(text: &str) -> String {
    format!("'{text}' is not a time; use a duration back from now (90s, 15m, 2h, 7d) or a UTC time like 2026-11-30T04:00:00Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_012_371_123);
        assert_eq!(format_rfc3339(t), "2026-11-30T04:19:31.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn since_values() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(parse_since("90s", now), Ok(1_000_000_000 - 90_000));
        assert_eq!(parse_since("2h", now), Ok(1_000_000_000 - 7_200_000));
        assert_eq!(
            parse_since("2026-11-30T04:19:31.123Z", now),
            Ok(1_796_012_371_123)
        );
        assert_eq!(parse_since("1970-01-02T00:00:00Z", now), Ok(86_400_000));
        assert!(parse_since("yesterday", now)
            .unwrap_err()
            .contains("not a time"));
        assert!(parse_since("2026-13-01T00:00:00Z", now).is_err());
        assert!(parse_since("5w", now).is_err());
    }
}
